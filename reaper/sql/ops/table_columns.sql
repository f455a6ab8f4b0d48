-- The columns a table has now (dropped columns left out), to name the ones a sweep's predicate
-- uses that a migration removed or renamed.
SELECT a.attname::text AS column_name
FROM pg_attribute a
WHERE a.attrelid = to_regclass(%(table)s) AND a.attnum > 0 AND NOT a.attisdropped

-- The columns a table has now (dropped columns left out), to name the ones a sweep's predicate
-- uses that a migration removed or renamed, and their types (a timestamp or date column
-- compared with a cutoff is read in timestamp_time_zone), in the table's order; generated:
-- a generated column (an archive's cannot take a deleted row's value).
SELECT a.attname::text AS column_name,
       format_type(a.atttypid, a.atttypmod) AS column_type,
       t.typname::text AS base_type,
       a.attgenerated <> '' AS generated
FROM pg_attribute a
JOIN pg_type t ON t.oid = CASE WHEN (SELECT typtype FROM pg_type WHERE oid = a.atttypid) = 'd'
                               THEN (SELECT typbasetype FROM pg_type WHERE oid = a.atttypid)
                               ELSE a.atttypid END
WHERE a.attrelid = to_regclass(%(table)s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum

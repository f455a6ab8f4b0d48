-- An index of a table, by name: its oid, schema-qualified name, validity, readiness, and
-- whether a CREATE INDEX is building it right now (another session's build: leave it alone).
SELECT i.indexrelid::oid::bigint AS oid,
       n.nspname AS schema_name,
       c.relname AS index_name,
       i.indisvalid AS valid,
       i.indisready AS ready,
       EXISTS (SELECT 1 FROM pg_stat_progress_create_index p
               WHERE p.index_relid = i.indexrelid) AS building
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.indrelid = to_regclass(%(table)s) AND c.relname = %(name)s

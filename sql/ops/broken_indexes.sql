-- Every index on the given tables that is not both valid and ready: left by an interrupted
-- CREATE INDEX CONCURRENTLY (or REINDEX CONCURRENTLY), or one being built right now. Names
-- are shown qualified outside schema public.
SELECT regexp_replace(i.indexrelid::regclass::text, '^public\.', '') AS index_name,
       regexp_replace(i.indrelid::regclass::text, '^public\.', '') AS table_name,
       i.indisvalid AS valid,
       i.indisready AS ready,
       pg_get_indexdef(i.indexrelid) AS definition,
       EXISTS (SELECT 1 FROM pg_stat_progress_create_index p
               WHERE p.index_relid = i.indexrelid) AS building
FROM pg_index i
WHERE i.indrelid IN (SELECT to_regclass(t) FROM unnest(%(tables)s::text[]) AS t)
  AND NOT (i.indisvalid AND i.indisready)
ORDER BY 1

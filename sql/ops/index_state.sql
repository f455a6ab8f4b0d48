-- The state of each named index of the given tables (or of their partitions and inheritance
-- children, at any depth: a batch's plan reads theirs): absent, or its table, validity and
-- readiness. An interrupted CREATE INDEX CONCURRENTLY leaves indisvalid = false: the planner
-- never uses it, but every write still maintains it (once indisready). An index lives in its
-- table's schema: it is looked up by name (as EXPLAIN and indexes.sql give it, or
-- schema.name) among the indexes of %(tables)s, never through search_path. Names are shown
-- qualified outside schema public.
WITH RECURSIVE tree (relid) AS (
    SELECT to_regclass(t)::oid FROM unnest(%(tables)s::text[]) AS t
    UNION
    SELECT h.inhrelid FROM pg_inherits h JOIN tree ON h.inhparent = tree.relid
)
SELECT n.name,
       x.indexrelid IS NOT NULL AS present,
       regexp_replace(x.indexrelid::regclass::text, '^public\.', '') AS index_name,
       regexp_replace(x.indrelid::regclass::text, '^public\.', '') AS table_name,
       coalesce(x.indisvalid, false) AS valid,
       coalesce(x.indisready, false) AS ready,
       pg_get_indexdef(x.indexrelid) AS definition
FROM unnest(%(names)s::text[]) WITH ORDINALITY AS n (name, ord)
LEFT JOIN LATERAL (
    SELECT i.indexrelid, i.indrelid, i.indisvalid, i.indisready
    FROM pg_index i
    JOIN pg_class c ON c.oid = i.indexrelid
    JOIN pg_namespace s ON s.oid = c.relnamespace
    WHERE i.indrelid IN (SELECT relid FROM tree)
      AND (c.relname = n.name OR s.nspname || '.' || c.relname = n.name)
    ORDER BY i.indexrelid
    LIMIT 1
) AS x ON true
ORDER BY n.ord

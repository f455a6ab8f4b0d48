-- The state of each named index: absent (no row in pg_index), or its table, validity and
-- readiness. An interrupted CREATE INDEX CONCURRENTLY leaves indisvalid = false: the planner
-- never uses it, but every write still maintains it (once indisready). Names are plain index
-- names (as EXPLAIN and indexes.sql give them), quoted here: "Weird Table_created_at_idx".
SELECT n.name,
       i.indexrelid IS NOT NULL AS present,
       i.indexrelid::regclass::text AS index_name,
       i.indrelid::regclass::text AS table_name,
       coalesce(i.indisvalid, false) AS valid,
       coalesce(i.indisready, false) AS ready,
       pg_get_indexdef(i.indexrelid) AS definition
FROM unnest(%(names)s::text[]) WITH ORDINALITY AS n (name, ord)
LEFT JOIN pg_index i ON i.indexrelid = to_regclass(quote_ident(n.name))
ORDER BY n.ord

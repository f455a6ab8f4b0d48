-- The relations a declared table covers: itself, and every inheritance child and partition
-- at any depth (pg_inherits holds both), each with its kind and its size from the catalog
-- (never a scan): estimated rows (-1: never analyzed), heap blocks when analyzed, heap
-- blocks now. reaper deletes only from the ones whose kind is 'r' (an ordinary table: a
-- heap of its own, in which a tuple id names one row) and that no DELETE rule rewrites;
-- reaper.db refuses the others.
-- %(table)s is a regclass name, quoted parts (reaper.db).
WITH RECURSIVE tree (oid) AS (
    SELECT %(table)s::regclass::oid
    UNION
    SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.oid
)
SELECT c.oid::bigint AS oid,
       n.nspname::text AS schema,
       c.relname::text AS name,
       c.relkind::text AS relkind,
       c.oid = %(table)s::regclass AS declared,
       -- A rule ON DELETE (pg_rewrite.ev_type '4') rewrites a DELETE into other statements:
       -- the rows a batch selected would not be the rows it deletes.
       EXISTS (SELECT 1 FROM pg_rewrite r WHERE r.ev_class = c.oid AND r.ev_type = '4')
           AS delete_rule,
       c.reltuples::bigint AS estimated_rows,
       c.relpages::bigint AS analyzed_blocks,
       CASE WHEN c.relkind = 'r'
            THEN (pg_relation_size(c.oid) / current_setting('block_size')::int)::bigint
            ELSE 0 END AS blocks
FROM tree
JOIN pg_class c ON c.oid = tree.oid
JOIN pg_namespace n ON n.oid = c.relnamespace
ORDER BY c.oid <> %(table)s::regclass, n.nspname, c.relname

-- The tables a delete from a table reaches through ON DELETE CASCADE, at any depth: each
-- foreign key that cascades, its referencing table, and how many of its rows one deleted row
-- of the swept table takes with it on average (the product of each step's referencing rows
-- over its referenced rows, from the catalog's estimates: pg_class.reltuples summed over a
-- partitioned table's leaves; NULL where a table was never analyzed). A foreign key of a
-- partition that its parent's declares (conparentid <> 0) is the parent's, counted once; a
-- table that cascades to itself, or back to one already on the path, ends the path there.
WITH RECURSIVE estimate AS (
    SELECT c.oid AS relid,
           CASE WHEN c.relkind = 'p'
                THEN (SELECT sum(p.reltuples) FILTER (WHERE p.reltuples >= 0)
                      FROM pg_partition_tree(c.oid) AS t JOIN pg_class p ON p.oid = t.relid
                      WHERE t.isleaf)
                WHEN c.reltuples >= 0 THEN c.reltuples END AS est_rows
    FROM pg_class c
    WHERE c.relkind IN ('r', 'p')
),
chain AS (
    SELECT k.oid AS constraint_oid, k.conrelid AS child, k.confrelid AS parent, 1 AS depth,
           ARRAY[k.confrelid, k.conrelid] AS path,
           (SELECT e.est_rows FROM estimate e WHERE e.relid = k.conrelid)
             / nullif((SELECT e.est_rows FROM estimate e WHERE e.relid = k.confrelid), 0)
             AS per_row
    FROM pg_constraint k
    WHERE k.contype = 'f' AND k.confdeltype = 'c' AND k.conparentid = 0
      AND k.confrelid = to_regclass(%(table)s)
    UNION ALL
    SELECT k.oid, k.conrelid, k.confrelid, c.depth + 1, c.path || k.conrelid,
           c.per_row
             * (SELECT e.est_rows FROM estimate e WHERE e.relid = k.conrelid)
             / nullif((SELECT e.est_rows FROM estimate e WHERE e.relid = k.confrelid), 0)
    FROM chain c
    JOIN pg_constraint k ON k.confrelid = c.child
    WHERE k.contype = 'f' AND k.confdeltype = 'c' AND k.conparentid = 0
      AND c.child <> ALL (c.path[1:cardinality(c.path) - 1])
      AND c.child <> c.parent
      AND c.depth < 10
)
SELECT c.depth,
       k.conname::text AS constraint_name,
       regexp_replace(c.child::regclass::text, '^public\.', '') AS referencing_table,
       regexp_replace(c.parent::regclass::text, '^public\.', '') AS referenced_table,
       c.child = c.parent AS to_itself,
       (SELECT e.est_rows FROM estimate e WHERE e.relid = c.child)::bigint AS estimated_rows,
       c.per_row::float8 AS per_row
FROM chain c
JOIN pg_constraint k ON k.oid = c.constraint_oid
ORDER BY c.path

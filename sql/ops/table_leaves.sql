-- The relations that hold a table's rows: the table itself, or a partitioned table's leaf
-- partitions, with their estimated rows (-1: never analyzed) and heap blocks. Plans name the
-- leaves, never the partitioned parent.
SELECT c.relname::text AS relname,
       c.reltuples::bigint AS estimated_rows,
       (pg_relation_size(c.oid) / current_setting('block_size')::int)::bigint AS blocks
FROM (SELECT relid FROM pg_partition_tree(to_regclass(%(table)s)) WHERE isleaf
      UNION
      SELECT oid FROM pg_class WHERE oid = to_regclass(%(table)s) AND relkind <> 'p') AS t
JOIN pg_class c ON c.oid = t.relid

-- A table's size and upkeep from the catalog and the statistics collector, never a scan:
-- estimated rows (pg_class.reltuples, -1 when never analyzed), bytes on disk with indexes and
-- TOAST, dead tuples, and when (auto)vacuum last ran (so an operator sees whether the space
-- that sweeps free is being made reusable). A partitioned table's rows live in its leaf
-- partitions: their figures are summed, and its vacuum times are the least recent of theirs
-- (NULL when one was never vacuumed).
SELECT CASE WHEN bool_and(c.reltuples < 0) THEN -1
            ELSE sum(greatest(c.reltuples, 0)) END::bigint AS estimated_rows,
       sum(pg_total_relation_size(c.oid))::bigint AS total_bytes,
       sum(s.n_live_tup)::bigint AS live_tuples,
       sum(s.n_dead_tup)::bigint AS dead_tuples,
       CASE WHEN count(*) = count(s.last_vacuum) THEN min(s.last_vacuum) END AS last_vacuum,
       CASE WHEN count(*) = count(s.last_autovacuum)
            THEN min(s.last_autovacuum) END AS last_autovacuum
FROM (SELECT relid FROM pg_partition_tree(to_regclass(%(table)s)) WHERE isleaf
      UNION
      SELECT oid FROM pg_class WHERE oid = to_regclass(%(table)s) AND relkind <> 'p') AS t
JOIN pg_class c ON c.oid = t.relid
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
HAVING count(*) > 0

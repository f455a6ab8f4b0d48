-- A table's size and upkeep from the catalog and the statistics collector, never a scan:
-- estimated rows (pg_class.reltuples, -1 when never analyzed), bytes on disk with indexes and
-- TOAST, dead tuples, and when (auto)vacuum last ran (so an operator sees whether the space
-- that sweeps free is being made reusable).
SELECT c.reltuples::bigint AS estimated_rows,
       pg_total_relation_size(c.oid) AS total_bytes,
       s.n_live_tup AS live_tuples,
       s.n_dead_tup AS dead_tuples,
       s.last_vacuum,
       s.last_autovacuum,
       s.last_analyze,
       s.last_autoanalyze
FROM pg_class c
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid = to_regclass(%(table)s)

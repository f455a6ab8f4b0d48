-- Whether the space a table's deleted rows take is being reclaimed, from the catalog and the
-- statistics views only (no VACUUM needed): its dead rows (pg_stat_user_tables.n_dead_tup,
-- which a VACUUM that could not remove them leaves as they were), the dead rows past which
-- autovacuum vacuums it (autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor x
-- reltuples, each from the table's own storage parameters when set, else the server's), whether
-- autovacuum may run on it at all, and when a vacuum last ran. A partitioned table's figures
-- are its leaf partitions', summed; its vacuum time is the least recent of theirs.
SELECT sum(s.n_dead_tup)::bigint AS dead_rows,
       sum(coalesce(o.threshold, current_setting('autovacuum_vacuum_threshold')::float8)
           + coalesce(o.scale_factor,
                      current_setting('autovacuum_vacuum_scale_factor')::float8)
             * greatest(c.reltuples, 0))::bigint AS autovacuum_threshold,
       current_setting('autovacuum')::bool AND current_setting('track_counts')::bool
           AND bool_and(coalesce(o.enabled, true)) AS autovacuum_enabled,
       CASE WHEN count(*) = count(greatest(s.last_vacuum, s.last_autovacuum))
            THEN min(greatest(s.last_vacuum, s.last_autovacuum)) END AS last_vacuum,
       sum(s.autovacuum_count)::bigint AS autovacuum_count
FROM (SELECT relid FROM pg_partition_tree(to_regclass(%(table)s)) WHERE isleaf
      UNION
      SELECT oid FROM pg_class WHERE oid = to_regclass(%(table)s) AND relkind <> 'p') AS t
JOIN pg_class c ON c.oid = t.relid
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
CROSS JOIN LATERAL (
    SELECT max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_threshold')::float8
               AS threshold,
           max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_scale_factor')::float8
               AS scale_factor,
           max(option_value) FILTER (WHERE option_name = 'autovacuum_enabled')::bool AS enabled
    FROM pg_options_to_table(c.reloptions)
) AS o
HAVING count(*) > 0

-- Whether the role sees every session's state and query in pg_stat_activity (a member of
-- pg_read_all_stats, directly or through pg_monitor): the pacer counts live traffic there.
SELECT pg_has_role('pg_read_all_stats', 'USAGE')

-- What the pacer (reaper/pacing.py) measures before each batch, in one round trip:
-- the primary's WAL position in bytes (NULL on a standby); the client sessions of this
-- database other than reaper's own that run a statement or ran one within
-- %(busy_window)s seconds; those whose state this role may not read; and each standby's
-- replay position and lag. A role without pg_monitor (or pg_read_all_stats) sees the rows of
-- other roles' sessions and standbys with NULL columns: "visible" says so.
SELECT
    CASE WHEN pg_is_in_recovery() THEN NULL
         ELSE (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint END AS wal_lsn,
    (SELECT count(*) FROM pg_stat_activity AS a
      WHERE a.datname = current_database()
        AND a.backend_type = 'client backend'
        AND a.pid <> pg_backend_pid()
        AND a.application_name IS DISTINCT FROM %(application_name)s
        AND (a.state = 'active'
             OR a.state_change > clock_timestamp() - make_interval(secs => %(busy_window)s))
    ) AS busy_sessions,
    (SELECT count(*) FROM pg_stat_activity AS a
      WHERE a.datname = current_database()
        AND a.backend_type = 'client backend'
        AND a.state IS NULL) AS hidden_sessions,
    (SELECT coalesce(json_agg(json_build_object(
                'name', coalesce(nullif(r.application_name, ''), host(r.client_addr),
                                 r.pid::text),
                'visible', r.state IS NOT NULL,
                'replay_lsn', (r.replay_lsn - '0/0'::pg_lsn)::bigint,
                'replay_lag', extract(epoch FROM r.replay_lag)::float8)
            ORDER BY r.pid), '[]'::json)
       FROM pg_stat_replication AS r) AS standbys

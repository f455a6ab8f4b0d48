-- What the pacer (reaper/pacing.py) measures before each batch, in one round trip:
-- the primary's WAL position in bytes (NULL on a standby); the client sessions of this
-- database other than reaper's own that run a statement or ran one within
-- %(busy_window)s seconds; those whose state this role may not read; and each standby's
-- replay position and lag; and, for each of those other sessions whose last statement ended
-- within %(busy_window)s seconds, how long that statement took as the server saw it (from
-- its start to the session's return to idle, its commit included) and how long ago it
-- ended, or for a statement still running, how long it has run so far (ended 0 s ago):
-- what live traffic suffers. A role without pg_monitor (or pg_read_all_stats) sees
-- the rows of other roles' sessions and standbys with NULL columns: "visible" says so.
-- pg_stat_activity is read once (the CTE): each reading of the view plans and runs its joins
-- again, and three of them made this the slowest statement before a batch (3 ms against 1.5).
WITH a AS MATERIALIZED (
    SELECT state, state_change, query_start, application_name
      FROM pg_stat_activity
     WHERE datname = current_database()
       AND backend_type = 'client backend'
       AND pid <> pg_backend_pid()
)
SELECT
    CASE WHEN pg_is_in_recovery() THEN NULL
         ELSE (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint END AS wal_lsn,
    (SELECT count(*) FROM a
      WHERE a.application_name IS DISTINCT FROM %(application_name)s
        AND (a.state = 'active'
             OR a.state_change > clock_timestamp() - make_interval(secs => %(busy_window)s))
    ) AS busy_sessions,
    (SELECT count(*) FROM a WHERE a.state IS NULL) AS hidden_sessions,
    (SELECT coalesce(json_agg(json_build_object(
                'name', coalesce(nullif(r.application_name, ''), host(r.client_addr),
                                 r.pid::text),
                'visible', r.state IS NOT NULL,
                'replay_lsn', (r.replay_lsn - '0/0'::pg_lsn)::bigint,
                'replay_lag', extract(epoch FROM r.replay_lag)::float8)
            ORDER BY r.pid), '[]'::json)
       FROM pg_stat_replication AS r) AS standbys,
    (SELECT coalesce(json_agg(json_build_array(
                extract(epoch FROM CASE WHEN a.state = 'active'
                                        THEN clock_timestamp() ELSE a.state_change END
                                   - a.query_start)::float8,
                extract(epoch FROM CASE WHEN a.state = 'active' THEN interval '0'
                                        ELSE clock_timestamp() - a.state_change END)::float8)),
                     '[]'::json)
       FROM a
      WHERE a.application_name IS DISTINCT FROM %(application_name)s
        AND a.state IN ('active', 'idle', 'idle in transaction')
        AND a.query_start IS NOT NULL
        AND a.state_change > clock_timestamp() - make_interval(secs => %(busy_window)s)
    ) AS statements

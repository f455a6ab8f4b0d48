-- Who holds the advisory locks %(keys)s (another replica, a `reaper run-once` by hand, or any
-- login that computed the keys): for the log line of a skipped run and `reaper status`.
-- PostgreSQL shows every role the pid, user and application_name of other sessions; their
-- client address and times only to a superuser or a member of pg_read_all_stats (NULL here,
-- shown as hidden: an unknown address is not a local connection).
SELECT DISTINCT ON (a.pid) a.pid, coalesce(a.application_name, '') AS application_name,
       CASE WHEN a.client_addr IS NOT NULL THEN host(a.client_addr)
            WHEN a.backend_start IS NOT NULL THEN 'local'
            ELSE 'hidden' END AS client,
       a.backend_start, coalesce(a.usename::text, '') AS "user", a.state_change AS state_since
FROM pg_locks l
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid <> pg_backend_pid()
  -- Advisory locks are per database: the same key held in another database is no conflict.
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND ((l.classid::bigint << 32) | l.objid::bigint) = ANY (%(keys)s::bigint[])
ORDER BY a.pid

-- Who holds the advisory locks %(keys)s (another replica, a `reaper run-once` by hand): for
-- the log line of a skipped run.
SELECT a.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local'),
       a.backend_start
FROM pg_locks l
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid <> pg_backend_pid()
  AND ((l.classid::bigint << 32) | l.objid::bigint) = ANY (%(keys)s::bigint[])
ORDER BY a.pid

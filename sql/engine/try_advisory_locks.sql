-- Take the session-level advisory locks %(keys)s without waiting (pg_try_advisory_lock), but
-- only on the server session %(server_pid)s that this connection was configured on: the
-- server process that answered (first column) and the keys it got (second). The caller
-- releases them all when it did not get every one. Session-level: the locks outlive this
-- statement's transaction and are held until pg_advisory_unlock_all() or the end of the
-- session, so the connection must be a real server session (direct, or a pooler in session
-- mode). When a pooler lent this statement another server session, CASE takes no lock there:
-- nothing is left behind on a session that reaper does not own.
SELECT pg_backend_pid(),
       coalesce(array_agg(k) FILTER (
           WHERE CASE WHEN pg_backend_pid() = %(server_pid)s THEN pg_try_advisory_lock(k)
                      ELSE false END
       ), '{}'::bigint[])
FROM unnest(%(keys)s::bigint[]) AS k

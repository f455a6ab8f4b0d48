-- Take the session-level advisory locks %(keys)s without waiting (pg_try_advisory_lock); the
-- keys it got. The caller releases them all when it did not get every one. Session-level: the
-- locks outlive this statement's transaction and are held until pg_advisory_unlock_all() or
-- the end of the session, so the connection must be a real server session (direct, or a
-- pooler in session mode).
SELECT coalesce(array_agg(k) FILTER (WHERE pg_try_advisory_lock(k)), '{}'::bigint[])
FROM unnest(%(keys)s::bigint[]) AS k

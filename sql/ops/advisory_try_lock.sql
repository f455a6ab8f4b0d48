-- Take a session-level advisory lock without waiting; false when another session holds it.
SELECT pg_try_advisory_lock(%(key)s) AS locked, pg_backend_pid() AS pid

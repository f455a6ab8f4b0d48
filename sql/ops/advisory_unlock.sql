-- Release a session-level advisory lock; false when this session did not hold it.
SELECT pg_advisory_unlock(%(key)s) AS unlocked

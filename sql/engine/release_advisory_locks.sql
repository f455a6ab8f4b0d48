-- Release every session-level advisory lock this session holds.
SELECT pg_advisory_unlock_all()

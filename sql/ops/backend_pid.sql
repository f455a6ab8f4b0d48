-- The server process behind this connection: a pooler that moves a client between server
-- sessions shows as a pid that changes.
SELECT pg_backend_pid()

-- Whether this server session still holds an advisory lock, seen from a later statement:
-- through a transaction-pooling proxy (PgBouncer pool_mode=transaction) the next statement
-- may run on another server session, which holds no lock.
SELECT EXISTS (SELECT 1 FROM pg_locks
               WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted) AS held,
       pg_backend_pid() AS pid

-- The first statement of each batch's transaction, before batch_settings.sql lowers
-- lock_timeout for rows: the lock a DELETE takes on its table anyway (ROW EXCLUSIVE, which
-- conflicts only with SHARE and stronger locks: a migration's ALTER TABLE, CREATE INDEX
-- without CONCURRENTLY, an explicit LOCK TABLE), taken first so that it is waited for under
-- the session's lock_timeout (--lock-timeout) and not the milliseconds a batch gives a row a
-- writer holds. A table lock held past it fails the run: no row is blamed for it.
-- {heap}: the one heap the batch deletes from (FROM ONLY), composed by reaper.db.
LOCK TABLE ONLY {heap} IN ROW EXCLUSIVE MODE

-- How many of the advisory locks %(keys)s this session holds, asked in a new transaction: a
-- transaction-pooling proxy that moved the session to another server backend answers fewer.
-- A bigint key shows in pg_locks as classid (high 32 bits), objid (low 32 bits), objsubid 1.
SELECT count(*)
FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND pid = pg_backend_pid()
  AND ((classid::bigint << 32) | objid::bigint) = ANY (%(keys)s::bigint[])

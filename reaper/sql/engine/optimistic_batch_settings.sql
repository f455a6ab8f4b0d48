-- Run in an optimistic heap-walk batch's transaction, before it (transaction-local):
-- lock_timeout 1 ms: a row that a writer holds fails the batch at once, never waited on.
-- statement_timeout half of deadlock_timeout: a writer that waits on a row this batch deleted
-- is released (the batch is cancelled and rolls back) before its deadlock check could run,
-- so no deadlock can ever pick the writer as its victim. deadlock_timeout is 1 s by default.
SELECT set_config('lock_timeout', '1ms', true),
       set_config(
           'statement_timeout',
           greatest(1, (extract(epoch FROM current_setting('deadlock_timeout')::interval)
                        * 500)::bigint)::text,
           true)

-- Run in each batch's transaction, before it (transaction-local). lock_timeout: a row that a
-- writer holds fails the batch within milliseconds instead of being waited on (the runner
-- splits the batch until the row is alone, and skips it for this run); far below
-- deadlock_timeout, so reaper gives up before any deadlock check could pick the writer as its
-- victim. Never longer than the session's own lock_timeout.
SELECT set_config(
    'lock_timeout',
    least(%(lock_timeout_ms)s::bigint,
          greatest(1, extract(epoch FROM current_setting('lock_timeout')::interval) * 1000)
              ::bigint)::text || 'ms',
    true)

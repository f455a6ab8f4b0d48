-- Run in each batch's transaction, before it (transaction-local). lock_timeout: a row that a
-- writer holds fails the batch within milliseconds instead of being waited on (the runner
-- splits the batch until the row is alone, and skips it for this run); far below
-- deadlock_timeout, so reaper gives up before any deadlock check could pick the writer as its
-- victim. Never longer than the session's own lock_timeout.
-- enable_bitmapscan off in a heap walk's batch (%(heap_walk)s): its block range is read by a
-- TID Range Scan; once the predicate's indexes are cheap enough, the planner would otherwise
-- read the whole table's candidates through a BitmapOr and filter them by the range. Plain
-- index scans stay on, for the predicate's own sub-queries (a token's primary key). The
-- predicate is not wrapped in a sub-select to hide it from the indexes instead: that
-- re-runs a sub-plan per row, four times the server CPU of the delete (bench B1).
-- Hash and merge joins off too: a range's rows are each tested by a probe of the other
-- table's index (a nested loop). A hash or merge join reads the other table whole, in every
-- batch: 700,000 tokens hashed for each 100-block batch of enrollment_requests_ephemeral
-- (114 ms), a full scan of 3,000,000 tokens' primary key at a larger size (817 ms).
-- plan_cache_mode back to the server's default in every batch: the session pins
-- force_custom_plan (reaper's own statements are never prepared, so they are planned with
-- their parameters whatever this says), but the plans the server caches inside a batch are
-- its foreign keys' checks (one per deleted row: does a row still reference it?) and its
-- triggers' queries. Forced custom, each of those is planned again for every row: bench B8's
-- token batches spent 33 us per row in the requests' key check instead of 9 us, and took
-- 3-4 times one plain DELETE.
SELECT set_config('plan_cache_mode', 'auto', true),
    set_config(
    'lock_timeout',
    least(%(lock_timeout_ms)s::bigint,
          greatest(1, extract(epoch FROM current_setting('lock_timeout')::interval) * 1000)
              ::bigint)::text || 'ms',
    true),
    set_config(
    'enable_bitmapscan',
    CASE WHEN %(heap_walk)s THEN 'off' ELSE current_setting('enable_bitmapscan') END,
    true),
    set_config(
    'enable_hashjoin',
    CASE WHEN %(heap_walk)s THEN 'off' ELSE current_setting('enable_hashjoin') END,
    true),
    set_config(
    'enable_mergejoin',
    CASE WHEN %(heap_walk)s THEN 'off' ELSE current_setting('enable_mergejoin') END,
    true)

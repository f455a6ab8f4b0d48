-- Run in each index batch's transaction, before the batch: the batch follows the predicate's
-- index, never a sequential scan. With LIMIT and an overestimated match count the planner
-- prefers a sequential scan that it expects to stop early; when the garbage is scattered that
-- scan reads the whole table, every batch (bench B3, 10,000,000 rows: the LIMIT loop's batches,
-- planned that way, take 0.8-1.6 s each; reaper's, through the indexes, 0.05-0.2 s). JIT off: the seqscan penalty inflates the plan's cost
-- past jit_above_cost, and compiling took 286 ms of a 2,000-row batch that runs in 70 ms.
-- Hash and merge joins off: a join in the predicate is a nested loop into indexes, stopped by
-- the LIMIT; a merge join of enrollment_requests_ephemeral's gauge read 3,040,000 pages
-- (13.7 s) to count 100 rows.
-- Sorts off: the only ORDER BY an index batch or a gauge has is that of each arm of a
-- predicate that is an OR of disjoint arms (first_eligible_arm.sql), which must be an ordered
-- range of the arm's index, stopped by its LIMIT. With sorts on, the planner read an arm
-- through a bitmap of every eligible entry and sorted them, when it estimated few.
SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true),
       set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
       set_config('enable_sort', 'off', true)

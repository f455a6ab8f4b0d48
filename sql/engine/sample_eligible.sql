-- How much of one heap is garbage, measured on a sample of its blocks (TABLESAMPLE SYSTEM
-- reads only the sampled blocks): rows matching the predicate, and rows sampled. The planner's
-- estimate cannot be trusted for this: a predicate with a subquery parameter was estimated at
-- 1,376,411 rows of 10,000,000 when 10,000 matched (bench B3), which sent the sweep on a full
-- heap walk. REPEATABLE: the same table gives the same sample, so the strategy choice is
-- reproducible (garbage that is clustered in a few blocks made a random sample's choice flip
-- between runs of one test).
SELECT count(*) FILTER (WHERE ({predicate})) AS eligible, count(*) AS sampled
FROM ONLY {heap} AS {alias} TABLESAMPLE SYSTEM (%(percent)s) REPEATABLE (0)

-- The plan of one of a sweep's statements, with its real parameters (plan_cache_mode is
-- force_custom_plan on reaper's sessions, so the cutoff's value shapes the plan). A plan,
-- never a run: nothing is locked or deleted.
EXPLAIN (FORMAT JSON) {statement}

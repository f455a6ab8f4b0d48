-- For one transaction: make the planner avoid sequential scans, to learn whether an index can
-- serve a statement at all when it prefers a scan.
SELECT set_config('enable_seqscan', 'off', true)

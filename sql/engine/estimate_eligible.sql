-- The planner's estimate of the rows a sweep would delete: costs a plan, never a scan.
EXPLAIN (FORMAT JSON) SELECT 1 FROM {table} WHERE ({predicate})

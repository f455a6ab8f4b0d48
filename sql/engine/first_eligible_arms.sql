-- first_eligible.sql for a predicate that is an OR of disjoint arms (no row matches two): the
-- first {limit} rows of each arm (first_eligible_arm.sql), UNION ALL (no row twice), then the
-- first {limit} of those. The Append reads the next arm only while fewer than {limit} rows
-- came, and each arm reads at most {limit} entries of its own index: whatever the backlog,
-- at most {limit} index entries per arm. As one WHERE (a OR b) ... LIMIT, the planner ORs
-- one bitmap per arm, which reads every eligible entry before the LIMIT applies.
SELECT * FROM ({arms}) AS arms LIMIT {limit}

-- Part of oldest_eligible.sql: the least of {mins} (min(expr::timestamptz), ...) over the
-- rows {predicate} matches: the whole predicate, or one arm of a predicate that is an OR of
-- disjoint arms, with that arm's own age (the other ages of its rows are not what the arm
-- compares). min() of an indexed column or expression under its arm's predicate is served by
-- the index (one row each).
(SELECT least({mins}) FROM {table} WHERE ({predicate}))

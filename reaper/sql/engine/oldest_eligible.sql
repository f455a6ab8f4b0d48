-- The oldest eligible row's timestamp: the least of the expressions that the predicate
-- compares with a cutoff ({oldest} is least(min(expr), ...), composed by reaper.db). min() of
-- an indexed column or expression is served by the index (one row each).
SELECT {oldest} FROM {table} WHERE ({predicate})

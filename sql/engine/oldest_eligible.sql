-- The oldest eligible row's timestamp: the least of the expressions that the predicate
-- compares with a cutoff ({oldest} is least(min(expr::timestamptz), ...), composed by
-- reaper.db; a timestamp or date column is read in the session's TimeZone, which reaper pins
-- to timestamp_time_zone). min() of an indexed column or expression is served by the index
-- (one row each). -infinity, and anything before 0001-01-01 (which no client datetime holds),
-- reads as 0001-01-01 00:00 UTC; infinity (never eligible: no cutoff is later) reads as none.
SELECT CASE WHEN oldest < 'infinity' THEN greatest(oldest, '0001-01-01 00:00:00+00') END
FROM (SELECT {oldest} AS oldest FROM {table} WHERE ({predicate})) AS eligible

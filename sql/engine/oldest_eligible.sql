-- The oldest eligible row's timestamp: the least of the expressions that the predicate
-- compares with a cutoff ({oldest} is one or more oldest_of.sql, composed by reaper.db; a
-- timestamp or date column is read in the session's TimeZone, which reaper pins to
-- timestamp_time_zone). -infinity, and anything before 0001-01-01 (which no client datetime
-- holds), reads as 0001-01-01 00:00 UTC; infinity (never eligible: no cutoff is later) reads
-- as none. MATERIALIZED: the least is computed once (inlined, each mention of oldest ran
-- every min() again).
WITH eligible AS MATERIALIZED (SELECT least({oldest}) AS oldest)
SELECT CASE WHEN oldest < 'infinity' THEN greatest(oldest, '0001-01-01 00:00:00+00') END
FROM eligible

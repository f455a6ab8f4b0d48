-- reaper_backlog_oldest_seconds: how far past its cutoff the oldest eligible row is, in
-- seconds. {since} is the sweep's "since" expression (the moment its retention started, in the
-- frame of {cutoff}). Only the first %(limit)s eligible rows the predicate's index finds are
-- looked at (--backlog-limit, as reaper_backlog_rows counts), so the cost is bounded whatever
-- the backlog: exact when fewer rows are eligible, or when the index returns them oldest
-- first (a plain indexed "since" column); a lower bound otherwise. No row: NULL. {eligible}
-- is first_eligible.sql of ({since})::timestamptz AS since; for a predicate that is an OR of
-- disjoint arms, first_eligible_arms.sql with one row of each arm (LIMIT 1) and all of them
-- (LIMIT ALL): an arm's first row in its age's order is its oldest, so the gauge is exact
-- and reads one index entry per arm.
-- -infinity (and anything before 0001-01-01) counts as 0001-01-01 00:00 UTC, so the age stays
-- finite (about 6.4e10 s); infinity counts as the cutoff itself (age 0): PostgreSQL cannot
-- subtract infinite timestamps.
SELECT extract(epoch FROM {cutoff} - min(least(greatest(eligible.since,
                                                       '0001-01-01 00:00:00+00'), {cutoff})))::float8
FROM ({eligible}) AS eligible

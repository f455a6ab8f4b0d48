-- reaper_backlog_oldest_seconds: how far past its cutoff the oldest eligible row is, in
-- seconds. {since} is the sweep's "since" expression (the moment its retention started, in the
-- frame of {cutoff}); where it is a plain indexed column, the index serves ORDER BY ... LIMIT 1
-- and this reads one row. No row: NULL. -infinity (and anything before 0001-01-01) counts as
-- 0001-01-01 00:00 UTC, so the age stays finite (about 6.4e10 s); infinity counts as the
-- cutoff itself (age 0): PostgreSQL cannot subtract infinite timestamps.
SELECT extract(epoch FROM {cutoff} - least(greatest(({since})::timestamptz,
                                                    '0001-01-01 00:00:00+00'), {cutoff}))::float8
FROM {table}
WHERE ({predicate})
ORDER BY ({since})
LIMIT 1

-- reaper_backlog_oldest_seconds: how far past its cutoff the oldest eligible row is, in
-- seconds. {since} is the sweep's "since" expression (the moment its retention started, in the
-- frame of {cutoff}); where it is a plain indexed column, the index serves ORDER BY ... LIMIT 1
-- and this reads one row. No row: NULL.
SELECT extract(epoch FROM {cutoff} - ({since}))::float8
FROM {table}
WHERE ({predicate})
ORDER BY ({since})
LIMIT 1

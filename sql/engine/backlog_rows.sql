-- reaper_backlog_rows: the rows a sweep would delete now, counted through the predicate's
-- index and capped at %(limit)s rows (--backlog-limit), so the count costs at most that many
-- index entries whatever the table's size (never a full COUNT(*)).
SELECT count(*) FROM (SELECT 1 FROM {table} WHERE ({predicate}) LIMIT %(limit)s) AS eligible

-- reaper_backlog_rows: the rows a sweep would delete now, counted through the predicate's
-- index and capped at %(limit)s rows (--backlog-limit), so the count costs at most that many
-- index entries per index range whatever the table's size (never a full COUNT(*)).
-- {eligible} is first_eligible.sql (or, arm by arm, first_eligible_arms.sql) of {table}.
SELECT count(*) FROM ({eligible}) AS eligible

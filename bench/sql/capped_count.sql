-- A backlog gauge that stays cheap on a large backlog: the eligible rows, counted through the
-- predicate's index, but never more than %(cap)s of them.
SELECT count(*) FROM (SELECT 1 FROM {table} WHERE ({predicate}) LIMIT %(cap)s) AS capped

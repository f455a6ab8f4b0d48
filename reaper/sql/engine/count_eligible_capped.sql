-- The rows a sweep would delete now, counted through the predicate's index but never more
-- than %(cap)s of them (`reaper status`: cheap on a huge backlog; below the cap it equals the
-- dry run's count).
SELECT count(*) FROM (SELECT 1 FROM {table} WHERE ({predicate}) LIMIT %(cap)s) AS capped

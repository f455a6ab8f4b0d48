-- The rows a sweep would delete now, counted through the predicate's index (dry run).
SELECT count(*) FROM {table} WHERE ({predicate})

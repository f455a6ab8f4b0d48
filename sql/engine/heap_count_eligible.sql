-- The rows of one heap that a sweep would delete now (a dry run sums them over the heaps the
-- run would delete from, so it counts exactly the rows a real run deletes).
SELECT count(*) FROM ONLY {heap} AS {alias} WHERE ({predicate})

-- Drop an index without blocking writers (outside any transaction block). {index} is
-- composed by reaper.db as a schema-qualified identifier.
DROP INDEX CONCURRENTLY IF EXISTS {index}

-- The naive size gauge: a full scan.
SELECT count(*) FROM {table}

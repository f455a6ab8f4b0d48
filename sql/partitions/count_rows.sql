-- The rows of one partition, counted just before it is detached: what its drop removes,
-- for reaper_deleted_rows_total.
SELECT count(*) FROM {partition}

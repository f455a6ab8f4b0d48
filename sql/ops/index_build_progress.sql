-- How far a CREATE INDEX on the given server process has got (PostgreSQL 12+).
SELECT phase, lockers_total, lockers_done, blocks_total, blocks_done, tuples_total, tuples_done
FROM pg_stat_progress_create_index
WHERE pid = %(pid)s

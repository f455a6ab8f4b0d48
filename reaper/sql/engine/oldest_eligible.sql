-- The oldest eligible row's timestamp: the least of the columns that the predicate compares
-- with a cutoff ({oldest} is least(min(col), ...), composed by reaper.db). min() on an
-- indexed column is served by the index (one row each).
SELECT {oldest} FROM {table} WHERE ({predicate})

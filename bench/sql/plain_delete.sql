-- Variant a, the physical limit: one DELETE of every row the sweep's predicate matches.
DELETE FROM {table} WHERE ({predicate})

-- Variant d, for the cost of FOR UPDATE SKIP LOCKED: the heap walk's batch without row locks
-- (a plain DELETE of a block range; it would wait on a row that a writer holds).
DELETE FROM {table}
WHERE ctid >= %(first_tid)s::tid AND ctid < %(end_tid)s::tid AND ({predicate})

-- One batch of a heap walk: the victims in a range of heap blocks, locked without waiting
-- (a row a writer holds is skipped, never waited on), then deleted by their tuple ids.
-- READ COMMITTED re-checks the predicate on a row a concurrent refresh changed, so a member
-- refreshed before the lock is not a victim; once locked, no one can change a victim before
-- the DELETE. The DELETE names only tuple ids, so it can only be a Tid Scan: repeating the
-- predicate there let the planner pick an index scan over every eligible row for each batch.
-- Linear: each block is read once per sweep.
-- {table} and {predicate} are composed by reaper.db; the predicate's parameters are named.
WITH victims AS MATERIALIZED (
    SELECT ctid FROM {table}
    WHERE ctid >= %(first_tid)s::tid AND ctid < %(end_tid)s::tid AND ({predicate})
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {table}
WHERE ctid = ANY (ARRAY(SELECT ctid FROM victims))

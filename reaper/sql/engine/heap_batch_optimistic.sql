-- One heap-walk batch without row locks: the garbage in a range of heap blocks, deleted in
-- place. Run after optimistic_batch_settings.sql in the same transaction, so that a row a
-- writer holds fails the batch within 1 ms (lock_timeout) instead of being waited on; the
-- runner then redoes the range with heap_batch.sql (FOR UPDATE SKIP LOCKED). The predicate is
-- evaluated on the row being deleted: READ COMMITTED re-checks it on a version that a
-- concurrent refresh committed, so a refreshed member is not deleted.
-- Why: locking a victim before deleting it writes (and WAL-logs) each row twice; on a backlog
-- this form runs at 0.85-1.14x one plain DELETE, the locking form at 2.0-3.0x (bench B1, (d)).
DELETE FROM {table}
WHERE ctid >= %(first_tid)s::tid AND ctid < %(end_tid)s::tid AND ({predicate})

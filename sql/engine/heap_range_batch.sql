-- One batch of a heap walk, in one heap, in its cheapest form: every victim of the tuple id
-- range [%(first_tid)s, %(end_tid)s), deleted in place (one TID Range Scan, each row written
-- once). The predicate is a condition of the DELETE itself, so READ COMMITTED re-checks it on
-- the committed version of a row a concurrent transaction changed (a member refreshed
-- meanwhile is not deleted). The rows deleted are the command's row count: no RETURNING,
-- which costs about half again the server CPU of the delete itself (bench B1). When the range
-- held more than the batch's limit, reaper.db rolls this batch back and deletes the range's
-- first victims with heap_batch.sql instead: a committed batch never deletes more than its
-- limit. FROM ONLY {heap}, no row lock: as in heap_batch.sql.
-- Why this form first: selecting the victims and then deleting them by tuple id costs about
-- three times one plain DELETE on a backlog (bench B1); this one costs about what a plain
-- DELETE of the same rows costs.
DELETE FROM ONLY {heap} AS {alias}
WHERE ctid >= %(first_tid)s::tid AND ctid < %(end_tid)s::tid
  AND ctid <> ALL (%(skip)s::tid[])
  AND ({predicate})

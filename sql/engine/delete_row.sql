-- One row, by its tuple id in one heap, if the predicate still holds for it: the batch of
-- one that isolates a row whose delete fails (a RESTRICT reference, a trigger that raises,
-- a row a writer holds). The predicate is re-checked as in heap_batch.sql.
DELETE FROM ONLY {heap} AS {alias}
WHERE ctid = %(tid)s::tid AND (SELECT ({predicate}))

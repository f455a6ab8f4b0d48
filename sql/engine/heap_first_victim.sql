-- The tuple id of the first victim of a heap-walk range (none: NULL), selected and not
-- deleted: the runner then deletes that row alone (delete_row.sql) to isolate a row whose
-- delete fails.
SELECT ctid::text AS victim FROM ONLY {heap} AS {alias}
WHERE ctid >= %(first_tid)s::tid AND ctid < %(end_tid)s::tid
  AND ctid <> ALL (%(skip)s::tid[])
  AND (SELECT ({predicate}))
ORDER BY ctid
LIMIT 1

-- The tuple id of one victim found through the predicate's index (none: no row), selected
-- and not deleted: the runner then deletes that row alone (delete_row.sql).
SELECT ctid::text AS victim FROM ONLY {heap} AS {alias}
WHERE ({predicate}) AND ctid <> ALL (%(skip)s::tid[])
LIMIT 1

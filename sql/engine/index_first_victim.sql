-- The tuple id of one victim found through the predicate's index (none: no row), selected
-- and not deleted: the runner then deletes that row alone (delete_row.sql). {victims} is
-- first_eligible.sql (or, arm by arm, first_eligible_arms.sql) of ctid from ONLY {heap} AS
-- {alias}, the rows skipped left out, LIMIT 1.
SELECT ctid::text AS victim FROM ({victims}) AS victims

-- The version (xmin) of the rows at the tuple ids %(tids)s of one heap, that are there: a row
-- a process found undeletable is left out of its later runs only while the same version of
-- it stands at the same tuple id (an update writes a new version elsewhere; a tuple id that
-- vacuum freed may hold another row, with another xmin). A Tid Scan: no other row is read.
SELECT ctid::text AS tid, xmin::text AS xmin
FROM ONLY {heap} AS {alias}
WHERE ctid = ANY (%(tids)s::tid[])

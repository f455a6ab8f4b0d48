-- One batch of a heap walk, in one heap: the first %(limit)s victims, in tuple id order, of
-- the tuple id range [%(first_tid)s, %(end_tid)s), then deleted by their tuple ids. Returns
-- the rows deleted, the rows selected, and the last tuple id selected: when the batch
-- selected %(limit)s rows, the next one starts right after it, so a batch never deletes
-- more than %(limit)s rows however much garbage the range holds.
-- FROM ONLY {heap}: one heap (reaper.db builds {heap} only from the catalog's proof that it
-- is an ordinary table), where a tuple id names exactly one row; on an inheritance parent,
-- a bare FROM would reach the same tuple ids in every child.
-- No row lock (FOR UPDATE needs the UPDATE privilege): a row a writer holds fails the batch
-- at the transaction's short lock_timeout (batch_settings.sql), and the runner splits it.
-- The predicate is written as a sub-select, so that no index on it can replace the TID Range
-- Scan of the victims nor the Tid Scan of the DELETE (a walk reads each block once). The
-- DELETE re-checks it: under READ COMMITTED, a row that a concurrent transaction changed is re-read in
-- its committed version and the predicate decides on that version (a member refreshed
-- meanwhile is no longer a victim).
-- {heap}, {alias} and {predicate} are composed by reaper.db; the predicate's parameters are
-- named; %(skip)s are the tuple ids of rows this run skipped (they failed alone).
-- {returning}, {archive} and {trail}: what the batch keeps of the rows it deletes
-- (trail.sql): by default RETURNING 1, nothing, and two NULL columns (keys, lines).
WITH victims AS MATERIALIZED (
    SELECT ctid FROM ONLY {heap} AS {alias}
    WHERE ctid >= %(first_tid)s::tid AND ctid < %(end_tid)s::tid
      AND ctid <> ALL (%(skip)s::tid[])
      AND (SELECT ({predicate}))
    ORDER BY ctid
    LIMIT %(limit)s
), gone AS (
    DELETE FROM ONLY {heap} AS {alias}
    WHERE ctid = ANY (ARRAY(SELECT ctid FROM victims))
      AND (SELECT ({predicate}))
    RETURNING {returning}
){archive}
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT count(*) FROM victims) AS selected,
       (SELECT max(ctid) FROM victims)::text AS last_tid,
       {trail}

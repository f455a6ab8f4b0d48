-- One batch served by the predicate's index, in one heap: at most %(limit)s victims, then
-- deleted by their tuple ids. For a few garbage rows scattered through a large table; the
-- heap walk takes over when garbage is a large part of the table. Returns the rows deleted
-- and the rows selected. FROM ONLY, no row lock and the predicate's re-check: as in
-- heap_batch.sql.
WITH victims AS MATERIALIZED (
    SELECT ctid FROM ONLY {heap} AS {alias}
    WHERE ({predicate}) AND ctid <> ALL (%(skip)s::tid[])
    LIMIT %(limit)s
), gone AS (
    DELETE FROM ONLY {heap} AS {alias}
    WHERE ctid = ANY (ARRAY(SELECT ctid FROM victims))
      AND (SELECT ({predicate}))
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT count(*) FROM victims) AS selected,
       NULL::text AS last_tid

-- One batch served by the predicate's index, in one heap: at most %(limit)s victims, then
-- deleted by their tuple ids. For a few garbage rows scattered through a large table; the
-- heap walk takes over when garbage is a large part of the table. Returns the rows deleted
-- and the rows selected. FROM ONLY, no row lock and the predicate's re-check: as in
-- heap_batch.sql. {victims} is first_eligible.sql of ctid from ONLY {heap} AS {alias}, the
-- rows skipped left out, LIMIT %(limit)s: for a predicate that is an OR of disjoint arms,
-- first_eligible_arms.sql, one ordered range of each arm's index; the DELETE re-checks the
-- whole {predicate}. {returning}, {archive} and {trail}: as in heap_batch.sql.
WITH victims AS MATERIALIZED (
    {victims}
), gone AS (
    DELETE FROM ONLY {heap} AS {alias}
    WHERE ctid = ANY (ARRAY(SELECT ctid FROM victims))
      AND (SELECT ({predicate}))
    RETURNING {returning}
){archive}
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT count(*) FROM victims) AS selected,
       NULL::text AS last_tid,
       {trail}

-- One batch of the index path that keeps a keyset across a run's batches, in one heap: at
-- most %(limit)s victims in the order of the predicate's age, from the age where the run's
-- last batch stopped (%(keyset)s, '-infinity' for the first), then deleted by their tuple
-- ids. Each batch starts in the index where the last one ended, so it never reads again the
-- entries of the rows the run already deleted: a run's work grows with the rows it deletes,
-- not with their square. The keyset only narrows where a batch looks: the DELETE re-checks
-- the whole {predicate}, as in index_batch.sql. A row that becomes garbage behind the keyset
-- while the run goes (inserted, or updated, with an older age) is left for the next run.
-- {victims} is first_eligible_arm.sql of ctid and the age as key, from ONLY {heap} AS {alias},
-- the rows skipped left out, the keyset's bound added, ORDER BY the age LIMIT %(limit)s.
-- Returns what index_batch.sql returns, then last_key: the greatest age selected, as text.
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
       {trail},
       (SELECT max(key) FROM victims)::text AS last_key

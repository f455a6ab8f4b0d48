-- index_batch for a partitioned table: a tuple id is unique only within one partition, so
-- each victim is named by its partition (tableoid) and its tuple id; naming it by ctid alone
-- would also delete the rows at the same position in the other partitions.
WITH victims AS MATERIALIZED (
    SELECT tableoid, ctid FROM {table}
    WHERE ({predicate})
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {table}
WHERE ctid = ANY (ARRAY(SELECT ctid FROM victims))
  AND (tableoid, ctid) IN (SELECT tableoid, ctid FROM victims)

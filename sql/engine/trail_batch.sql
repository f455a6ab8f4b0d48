-- A bare DELETE batch (heap_range_batch.sql, delete_row.sql) when the sweep keeps something of
-- the rows it deletes: the same DELETE, its RETURNING and the archive's INSERT in one
-- statement, so the rows archived are exactly the rows deleted, in the same transaction. Its
-- result has the columns of heap_batch.sql: every row the DELETE reached is one it deleted.
-- {delete} is the bare DELETE; {returning}, {archive} and {trail} as in heap_batch.sql.
WITH gone AS (
    {delete}
    RETURNING {returning}
){archive}
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT count(*) FROM gone) AS selected,
       NULL::text AS last_tid,
       {trail}

-- The archive's INSERT, a data-modifying CTE after a batch's gone (heap_batch.sql): it runs
-- once, to completion, in the batch's statement, whether or not the query reads it; the rows
-- it writes are exactly those the DELETE returned. The columns are named on both sides (every
-- column of the swept table, from the catalog): the archive may order its columns otherwise
-- and add its own (archived_at DEFAULT now()). OVERRIDING SYSTEM VALUE keeps a row's own id
-- in an archive whose id column is an identity GENERATED ALWAYS.
, archived AS (
    INSERT INTO {archive} ({columns}) OVERRIDING SYSTEM VALUE
    SELECT {columns} FROM gone
)

-- Detach a partition without blocking readers or writers of the parent (PostgreSQL 14+):
-- two transactions, each waiting (under lock_timeout) for the ones that see the partition.
-- Interrupted between them, the partition is left detach-pending: FINALIZE completes it.
ALTER TABLE {parent} DETACH PARTITION {partition} CONCURRENTLY

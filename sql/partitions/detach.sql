-- Detach a partition in one transaction: for servers before PostgreSQL 14 and for parents
-- with a DEFAULT partition, where CONCURRENTLY is refused. Takes ACCESS EXCLUSIVE on the
-- parent, waiting at most lock_timeout for it.
ALTER TABLE {parent} DETACH PARTITION {partition}

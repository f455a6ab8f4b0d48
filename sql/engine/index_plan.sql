-- What an index batch reads, over the declared table (every heap it covers): the victims
-- query of index_batch.sql, planned by `reaper check` to tell which index serves it.
-- {victims}: first_eligible.sql (or first_eligible_arms.sql) of ctid, LIMIT %(batch_size)s.
{victims}

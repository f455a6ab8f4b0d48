-- What an index batch reads, over the declared table (every heap it covers): the victims
-- query of index_batch.sql, planned by `reaper check` to tell which index serves it.
SELECT ctid FROM {table} WHERE ({predicate}) LIMIT %(batch_size)s

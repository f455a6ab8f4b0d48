-- One batch of the loop most cleaners use (variant b): PostgreSQL has no DELETE ... LIMIT, so
-- the victims' keys come from a LIMIT subquery. {table}, {key} and {predicate} are composed.
DELETE FROM {table} WHERE {key} IN (SELECT {key} FROM {table} WHERE ({predicate}) LIMIT %(batch_size)s)

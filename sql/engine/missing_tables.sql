-- The tables among %(tables)s that do not exist (or that this role cannot see): /readyz.
SELECT t FROM unnest(%(tables)s::text[]) AS t WHERE to_regclass(t) IS NULL ORDER BY t

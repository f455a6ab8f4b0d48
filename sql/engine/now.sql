-- The database clock, from which every cutoff is computed (now() - retention), or a pinned
-- time (tests).
SELECT coalesce(%(now)s::timestamptz, now())

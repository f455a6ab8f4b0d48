-- Requests resolved before the cutoff, or still pending and created before it, whatever
-- their token. Served by enrollment_requests_resolved_or_created_idx, an index on this very
-- expression (written any other way, e.g. as an OR of resolved_at and created_at, no index
-- scan would match it). Requests of ephemeral tokens go sooner, by their own sweep
-- (enrollment_requests_ephemeral.sql); one still here past this cutoff is eligible for both
-- sweeps, and whichever runs first deletes it. Excluding them here would cost every row a
-- look at its token: an anti-join that made a heap walk's batch take 30-90% longer (10,000
-- rows, 100,000 tokens).
coalesce(resolved_at, created_at) < %(cutoff)s

-- When the request was resolved, or created if still pending, moved into the frame of the
-- node cutoff: a request of an ephemeral token is measured against the ephemeral cutoff, so
-- it is shifted back by (ephemeral_cutoff - cutoff). No index serves this ORDER BY: the
-- oldest-row query sorts the eligible rows (top-1, no memory), a cost that grows with the
-- backlog and that statement_timeout bounds.
coalesce(resolved_at, created_at)
- CASE WHEN EXISTS (SELECT 1 FROM bootstrap_tokens t WHERE t.id = token_id AND t.ephemeral)
       THEN %(ephemeral_cutoff)s - %(cutoff)s
       ELSE interval '0' END

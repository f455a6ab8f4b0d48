-- Requests resolved before the cutoff, or still pending and created before it. The cutoff is
-- the node retention's, or the ephemeral retention's when the request's token is ephemeral.
-- Each arm is written so that a B-tree index serves it (never COALESCE(resolved_at, created_at)):
-- resolved_at_idx and created_at_idx. The OR is exact because settings validation keeps the
-- ephemeral retention <= the node retention, so an ephemeral request past the node cutoff is
-- past the ephemeral cutoff too. The ephemeral arm asks the token's primary key about each
-- request past the ephemeral cutoff (one index probe a row), so its cost does not grow with
-- the number of ephemeral tokens: a list of them (= ANY (ARRAY(SELECT ...))) was searched
-- linearly for every row, 10 s per strategy sample with 400,000 ephemeral tokens.
(resolved_at < %(cutoff)s OR (resolved_at IS NULL AND created_at < %(cutoff)s))
OR (
    (resolved_at < %(ephemeral_cutoff)s
     OR (resolved_at IS NULL AND created_at < %(ephemeral_cutoff)s))
    AND EXISTS (SELECT 1 FROM bootstrap_tokens t WHERE t.id = token_id AND t.ephemeral)
)

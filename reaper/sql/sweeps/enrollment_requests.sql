-- Requests resolved before the cutoff, or still pending and created before it. The cutoff is
-- the node retention's, or the ephemeral retention's when the request's token is ephemeral.
-- Each arm is written so that a B-tree index serves it (never COALESCE(resolved_at, created_at)):
-- resolved_at_idx, created_at_idx, and token_id_idx for the ephemeral arm. The OR is exact
-- because settings validation keeps the ephemeral retention <= the node retention, so an
-- ephemeral request past the node cutoff is past the ephemeral cutoff too.
(resolved_at < %(cutoff)s OR (resolved_at IS NULL AND created_at < %(cutoff)s))
OR (
    token_id = ANY (ARRAY(SELECT id FROM bootstrap_tokens WHERE ephemeral))
    AND (resolved_at < %(ephemeral_cutoff)s
         OR (resolved_at IS NULL AND created_at < %(ephemeral_cutoff)s))
)

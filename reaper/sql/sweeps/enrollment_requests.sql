-- Requests resolved before the cutoff, or still pending and created before it. The cutoff is
-- the node retention's, or the ephemeral retention's when the request's token is ephemeral.
-- Each arm is written so that a B-tree index serves it (never COALESCE(resolved_at, created_at)):
-- resolved_at_idx, created_at_idx, and token_id_idx for the ephemeral arm (its
-- token_id = ANY (...) is the index condition). The OR is exact because settings validation
-- keeps the ephemeral retention <= the node retention, so an ephemeral request past the node
-- cutoff is past the ephemeral cutoff too.
-- Where a row is tested instead (a heap walk, the strategy sample, a re-check), PostgreSQL
-- evaluates the arm's conditions in the order written: the age first, then one probe of the
-- token's primary key (EXISTS), and only for a request of an ephemeral token past the
-- ephemeral cutoff the list of ephemeral tokens, which is searched linearly. So the cost of
-- testing a row does not grow with the number of ephemeral tokens (with the list first, 400,000
-- ephemeral tokens made the strategy sample alone run past 10 s).
(resolved_at < %(cutoff)s OR (resolved_at IS NULL AND created_at < %(cutoff)s))
OR (
    (resolved_at < %(ephemeral_cutoff)s
     OR (resolved_at IS NULL AND created_at < %(ephemeral_cutoff)s))
    AND EXISTS (SELECT 1 FROM bootstrap_tokens t WHERE t.id = token_id AND t.ephemeral)
    AND token_id = ANY (ARRAY(SELECT id FROM bootstrap_tokens WHERE ephemeral))
)

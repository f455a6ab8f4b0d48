-- The indexes the built-in sweeps rely on. Each statement is one index, on a table of the
-- reference schema (public); `reaper indexes ensure` runs them CONCURRENTLY, on the tables of
-- its schema, in a session of its own whose search_path is pinned. The tests and the demo
-- apply this file as it is: one transaction whose search_path is pg_catalog alone.

BEGIN;
SET LOCAL search_path = pg_catalog, pg_temp;

-- nodes_silent and nodes_ephemeral: bootstrap members (no session) that are not banned.
CREATE INDEX IF NOT EXISTS nodes_bootstrap_enrolled_at_idx
    ON public.nodes (ephemeral, enrolled_at) WHERE expires_at IS NULL AND NOT banned;

-- nodes_session: members whose session lapsed.
CREATE INDEX IF NOT EXISTS nodes_session_expires_at_idx
    ON public.nodes (expires_at) WHERE NOT banned;

-- enrollment_requests: resolved_at < cutoff OR (resolved_at IS NULL AND created_at < cutoff),
-- one index per arm, of the kind a control plane already has. Each arm is read as an ordered
-- range of its own index, stopped by its LIMIT (a batch's victims, the gauges): a BitmapOr
-- of the two read every eligible entry before the LIMIT applied (666,667 entries, 40 ms, for
-- a 500-row gauge).
CREATE INDEX IF NOT EXISTS enrollment_requests_resolved_at_idx
    ON public.enrollment_requests (resolved_at);

-- The pending requests only: the arm that reads created_at is that of resolved_at IS NULL.
CREATE INDEX IF NOT EXISTS enrollment_requests_pending_created_at_idx
    ON public.enrollment_requests (created_at) WHERE resolved_at IS NULL;

-- The foreign key's referencing column first (without it every token delete scans the
-- requests), then the age that enrollment_requests_ephemeral compares, greatest(resolved_at,
-- created_at): for each ephemeral token, one index range reads only its requests past the
-- cutoff. On token_id alone, each token's fresh requests were read too, and a run with
-- 3,050,000 fresh requests of ephemeral tokens timed out on 141 eligible ones.
CREATE INDEX IF NOT EXISTS enrollment_requests_token_id_age_idx
    ON public.enrollment_requests (token_id, (greatest(resolved_at, created_at)));

-- bootstrap_tokens: expired tokens.
CREATE INDEX IF NOT EXISTS bootstrap_tokens_expires_at_idx
    ON public.bootstrap_tokens (expires_at);

-- The ephemeral tokens, the outer side of enrollment_requests_ephemeral's join: read in
-- proportion to their number, not to all tokens'.
CREATE INDEX IF NOT EXISTS bootstrap_tokens_ephemeral_idx
    ON public.bootstrap_tokens (id) WHERE ephemeral;

-- router_leases: expired leases.
CREATE INDEX IF NOT EXISTS routers_lease_expires_at_idx
    ON public.routers (lease_expires_at);

COMMIT;

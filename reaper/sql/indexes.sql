-- The indexes the built-in sweeps rely on. Each statement is one index; `reaper indexes
-- ensure` runs them CONCURRENTLY, and the tests and the demo apply them as they are.

-- nodes_silent and nodes_ephemeral: bootstrap members (no session) that are not banned.
CREATE INDEX IF NOT EXISTS nodes_bootstrap_enrolled_at_idx
    ON nodes (ephemeral, enrolled_at) WHERE expires_at IS NULL AND NOT banned;

-- nodes_session: members whose session lapsed.
CREATE INDEX IF NOT EXISTS nodes_session_expires_at_idx
    ON nodes (expires_at) WHERE NOT banned;

-- enrollment_requests: resolved_at < cutoff OR (resolved_at IS NULL AND created_at < cutoff),
-- one index per arm so that a BitmapOr serves the predicate.
CREATE INDEX IF NOT EXISTS enrollment_requests_resolved_at_idx
    ON enrollment_requests (resolved_at);
CREATE INDEX IF NOT EXISTS enrollment_requests_created_at_idx
    ON enrollment_requests (created_at);

-- The foreign key's referencing column: without it every token delete scans the requests,
-- and the ephemeral-token arm of the request sweep has no index.
CREATE INDEX IF NOT EXISTS enrollment_requests_token_id_idx
    ON enrollment_requests (token_id);

-- bootstrap_tokens: expired tokens.
CREATE INDEX IF NOT EXISTS bootstrap_tokens_expires_at_idx
    ON bootstrap_tokens (expires_at);

-- router_leases: expired leases.
CREATE INDEX IF NOT EXISTS routers_lease_expires_at_idx
    ON routers (lease_expires_at);

-- The worked example of a custom sweep: a gateway's token table (examples/token-table.toml
-- declares the sweeps). A pool controller creates a `worker` token for every worker and never
-- deletes it; legacy `machine` tokens pile up. Loaded by tests/test_custom_sweeps.py.

CREATE TABLE IF NOT EXISTS token (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    external_id  uuid NOT NULL UNIQUE,
    key          text NOT NULL UNIQUE,
    active       boolean NOT NULL DEFAULT true,
    token_type   text NOT NULL
        CHECK (token_type IN ('workspace_primary', 'worker', 'machine', 'restricted')),
    workspace_id bigint NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz
);

-- The application's own index: a workspace's tokens of one type, newest first.
CREATE INDEX IF NOT EXISTS token_workspace_type_created_idx
    ON token (workspace_id, token_type, created_at DESC, id DESC);

-- The sweeps' indexes. The application's index above cannot serve them: its first column is
-- workspace_id, which the predicates do not name, so the planner either reads the whole
-- index (169,000 buffers for one 5,000-row batch on 306,000 tokens) or the whole table.
-- Partial indexes hold only each sweep's candidates, in the order of its cutoff column: a
-- batch reads a few index pages (EXPLAIN in the README: 4 index buffers for 3,000 victims).
-- Cost: updated_at becomes indexed, so a worker's refresh of updated_at is no longer a HOT
-- update; the machine index changes only when a machine token is deactivated.
CREATE INDEX IF NOT EXISTS token_worker_updated_at_idx
    ON token (updated_at) WHERE token_type = 'worker';
CREATE INDEX IF NOT EXISTS token_machine_inactive_created_at_idx
    ON token (created_at) WHERE token_type = 'machine' AND NOT active;

-- The worked example of a custom sweep: a gateway's token table (examples/token-table.toml
-- declares the sweeps). A pool controller creates a `worker` token for every worker and never
-- deletes it; legacy `machine` tokens pile up. Loaded by tests/db/engine/test_custom_sweeps.py.
-- One transaction whose search_path is pg_catalog alone: the table is named with its schema,
-- and no function, operator or type that another role created is used.

BEGIN;
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE TABLE IF NOT EXISTS public.token (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    external_id  uuid NOT NULL UNIQUE,
    key          text NOT NULL UNIQUE,
    active       boolean NOT NULL DEFAULT true,
    token_type   text NOT NULL
        CHECK (token_type IN ('workspace_primary', 'worker', 'machine', 'restricted')),
    workspace_id bigint NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    expires_at   timestamptz
);

-- The application's own index: a workspace's tokens of one type, newest first.
CREATE INDEX IF NOT EXISTS token_workspace_type_created_idx
    ON public.token (workspace_id, token_type, created_at DESC, id DESC);

-- The sweeps' indexes, one per sweep, on the very expression its predicate compares with the
-- cutoff (examples/token-table.toml). Why not the application's index: its first column is
-- workspace_id, which the predicates do not name, so it can only be read whole. Why not a
-- partial index on updated_at WHERE token_type = 'worker': it serves the scan, but the planner
-- estimates `token_type = 'worker' AND updated_at < cutoff` as if the two were independent
-- (only workers are refreshed; other tokens' updated_at is old) and expects 71,788 stale
-- workers of 306,000 tokens where there are 4,000: for a batch's LIMIT 5000 it then prefers a
-- sequential scan, which reads the whole table (4,377 buffers, 188 ms) to find them. An
-- expression index has its own statistics (ANALYZE samples the expression), so the estimate is
-- right (3,896) and the batch reads 6 index and 59 heap buffers (18 ms). Rows of other types
-- are NULL in these indexes; B-tree deduplication keeps that small (2 MB each at 306,000 rows).
-- Cost: a worker's refresh of updated_at is no longer a HOT update (the expression reads it).
CREATE INDEX IF NOT EXISTS token_worker_refreshed_idx
    ON public.token ((CASE WHEN token_type = 'worker' THEN updated_at END));
CREATE INDEX IF NOT EXISTS token_machine_retired_idx
    ON public.token ((CASE WHEN token_type = 'machine' AND active = false THEN created_at END));

COMMIT;

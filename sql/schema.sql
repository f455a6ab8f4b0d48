-- The reference control-plane schema: the tables reaper sweeps, as the gateway, the
-- enrollment service and the router registry create them. Used by the tests and `make demo`.
-- Idempotent: safe to load twice. One transaction whose search_path is pg_catalog alone:
-- every table is named with its schema, and no function, operator or type that another role
-- created runs or is used (docs/security.md).

BEGIN;
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE TABLE IF NOT EXISTS public.bootstrap_tokens (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    token_hash  text NOT NULL UNIQUE,
    description text,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    expires_at  timestamptz NOT NULL,
    ephemeral   boolean NOT NULL DEFAULT false
);

CREATE TABLE IF NOT EXISTS public.nodes (
    peer_id            text PRIMARY KEY,
    -- No foreign key: a node outlives the token it enrolled with.
    bootstrap_token_id bigint,
    -- Every refresh rewrites enrolled_at: it is the last time the member was heard from.
    enrolled_at        timestamptz NOT NULL,
    -- The session's expiry; NULL for a member that enrolled with a bootstrap token.
    expires_at         timestamptz,
    banned             boolean NOT NULL DEFAULT false,
    ephemeral          boolean NOT NULL DEFAULT false
);

CREATE TABLE IF NOT EXISTS public.enrollment_requests (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    token_id    bigint REFERENCES public.bootstrap_tokens (id),
    peer_id     text NOT NULL,
    status      text NOT NULL CHECK (status IN ('pending', 'approved', 'rejected')),
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    resolved_at timestamptz
);

CREATE TABLE IF NOT EXISTS public.routers (
    router_id        text PRIMARY KEY,
    address          text NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT pg_catalog.now()
);

COMMIT;

-- The indexes (kept in indexes.sql so that `reaper indexes ensure` can build them concurrently)
-- are applied after this file: see reaper.dev.devserver.load_schema.

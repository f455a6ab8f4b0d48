-- The `reaper` role: exactly the privileges the sweeps, `reaper check` and `reaper status`
-- need, and nothing else: no superuser, no DDL, no INSERT, no TRUNCATE. Run it as the owner
-- of the control plane's tables, in their database: `psql -f reaper/sql/grants.sql`. Set the
-- role's password (or certificate) yourself: `\password reaper`. Idempotent.
--
-- `reaper indexes ensure` is DDL (CREATE INDEX): run it as the tables' owner, not as reaper.
-- So is dropping a partition wholly past a sweep's cutoff (ALTER TABLE ... DETACH PARTITION,
-- DROP TABLE): it needs ownership of the partitioned table and its partitions, which no GRANT
-- gives. With this role reaper never drops a partition: it deletes their rows in batches, and
-- `reaper check` fails its partitions check for a sweep that would drop one. To drop them,
-- run reaper as a member of the tables' owner (GRANT owner_role TO reaper), or set
-- partition_action = "off" to keep the row batches (docs/partitions.md).
-- The catalog views `check` and `status` read (pg_index, pg_constraint, pg_locks,
-- pg_stat_user_tables, pg_stat_progress_create_index) are readable by every role, and the
-- advisory locks need no privilege. CONNECT on the database is PUBLIC's by default.

DO $$ BEGIN CREATE ROLE reaper LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS; EXCEPTION WHEN duplicate_object THEN NULL; END $$;

GRANT USAGE ON SCHEMA public TO reaper;

-- SELECT finds the garbage (the predicates read these tables, including the subqueries:
-- requests read tokens, tokens read requests); DELETE removes it.
GRANT SELECT, DELETE ON nodes, enrollment_requests, bootstrap_tokens, routers TO reaper;

-- A batch locks its victims with SELECT ... FOR UPDATE SKIP LOCKED (never waiting on a row
-- a writer holds), and PostgreSQL requires UPDATE on at least one column of a table to lock
-- its rows: there is no lock-only privilege. reaper never updates; it gets UPDATE on the
-- key column alone, the least it can be given.
GRANT UPDATE (peer_id) ON nodes TO reaper;
GRANT UPDATE (id) ON enrollment_requests TO reaper;
GRANT UPDATE (id) ON bootstrap_tokens TO reaper;
GRANT UPDATE (router_id) ON routers TO reaper;

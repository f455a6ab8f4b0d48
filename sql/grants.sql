-- The `reaper` role: exactly the privileges the sweeps, `reaper check` and `reaper status`
-- need, and nothing else. It reads the tables the sweeps read and deletes from the tables they
-- sweep: no UPDATE of any column, no INSERT, TRUNCATE, REFERENCES or TRIGGER, no CREATE, no
-- DDL, no superuser. Run it as the owner of the control plane's tables, in their database, as
-- often as you like (it converges: privileges granted earlier beyond these are revoked):
--
--     psql "dbname=control user=control_owner" -f grants.sql
--
-- Creating the role needs CREATEROLE: where the owner lacks it, an administrator runs
-- `CREATE ROLE reaper LOGIN` once, then the owner runs this file. Set the role's password (or
-- certificate) yourself: `\password reaper`.
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
--
-- Temporary tables: PostgreSQL grants TEMPORARY on every database to PUBLIC, so reaper can
-- create them until the database's owner revokes that from PUBLIC (other roles may rely on
-- it: your call, see docs/security.md). This file revokes it from reaper itself, and says so
-- (a NOTICE) while PUBLIC still holds it; `reaper check` warns too.

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'reaper') THEN
    IF NOT (SELECT rolcreaterole OR rolsuper FROM pg_roles WHERE rolname = current_user) THEN
      RAISE EXCEPTION 'role reaper does not exist and % may not create roles', current_user
        USING HINT = 'ask an administrator to run: CREATE ROLE reaper LOGIN; then run this file again';
    END IF;
    CREATE ROLE reaper LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
  END IF;
END $$;

-- The schema of the tables: reaper.schema if set, else public.
SELECT pg_catalog.set_config('reaper.schema',
    coalesce(nullif(pg_catalog.current_setting('reaper.schema', true), ''), 'public'), false);

DO $$
DECLARE
  s text := pg_catalog.current_setting('reaper.schema');
  t text;
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = s) THEN
    RAISE EXCEPTION 'schema % does not exist in database %', s, current_database()
      USING HINT = 'set reaper.schema to the schema of the control plane''s tables (PGOPTIONS=''-c reaper.schema=NAME'')';
  END IF;
  IF NOT has_schema_privilege('reaper', s, 'USAGE') THEN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO reaper', s);
  END IF;
  -- SELECT finds the garbage (the predicates read these tables, including the subqueries:
  -- requests read tokens, tokens read requests); DELETE removes it. Everything else granted
  -- before (an older grants.sql gave UPDATE on the key columns) is taken back: revoking a
  -- table privilege revokes it on every column too.
  FOREACH t IN ARRAY ARRAY['nodes', 'enrollment_requests', 'bootstrap_tokens', 'routers'] LOOP
    EXECUTE format('REVOKE INSERT, UPDATE, TRUNCATE, REFERENCES, TRIGGER ON %I.%I FROM reaper', s, t);
    EXECUTE format('GRANT SELECT, DELETE ON %I.%I TO reaper', s, t);
  END LOOP;
  -- No objects of its own, temporary or not, as far as this file can tell: take back any
  -- grant made to reaper itself (what PUBLIC holds is the owner's call, below).
  IF EXISTS (SELECT FROM pg_database d, aclexplode(d.datacl) a
             WHERE d.datname = current_database() AND a.grantee = 'reaper'::regrole) THEN
    EXECUTE format('REVOKE CREATE, TEMPORARY ON DATABASE %I FROM reaper', current_database());
  END IF;
  IF EXISTS (SELECT FROM pg_namespace n, aclexplode(n.nspacl) a
             WHERE n.nspname = s AND a.grantee = 'reaper'::regrole
               AND a.privilege_type = 'CREATE') THEN
    EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM reaper', s);
  END IF;
  IF has_database_privilege('reaper', current_database(), 'TEMPORARY') THEN
    RAISE NOTICE 'reaper can still create temporary tables: PUBLIC holds TEMPORARY on database %', current_database()
      USING HINT = format('the database owner may run: REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
  END IF;
  IF has_schema_privilege('reaper', s, 'CREATE') THEN
    RAISE NOTICE 'reaper can still create tables in schema %: PUBLIC holds CREATE on it', s
      USING HINT = format('the schema owner may run: REVOKE CREATE ON SCHEMA %I FROM PUBLIC', s);
  END IF;
  -- Pacing: every session's state in pg_stat_activity, every standby's lag. A role
  -- membership is the cluster's, not this database's: this file only says how.
  IF NOT pg_has_role('reaper', 'pg_read_all_stats', 'USAGE') THEN
    RAISE NOTICE 'reaper cannot see other sessions and standbys, so it cannot pace its sweeps'
      USING HINT = 'a superuser may run: GRANT pg_read_all_stats TO reaper';
  END IF;
END $$;

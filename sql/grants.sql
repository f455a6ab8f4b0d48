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

DO $$
DECLARE
  t text;
BEGIN
  IF NOT has_schema_privilege('reaper', 'public', 'USAGE') THEN
    GRANT USAGE ON SCHEMA public TO reaper;
  END IF;
  -- SELECT finds the garbage (the predicates read these tables, including the subqueries:
  -- requests read tokens, tokens read requests); DELETE removes it. Everything else granted
  -- before (an older grants.sql gave UPDATE on the key columns) is taken back: revoking a
  -- table privilege revokes it on every column too.
  FOREACH t IN ARRAY ARRAY['nodes', 'enrollment_requests', 'bootstrap_tokens', 'routers'] LOOP
    EXECUTE format('REVOKE INSERT, UPDATE, TRUNCATE, REFERENCES, TRIGGER ON %I FROM reaper', t);
    EXECUTE format('GRANT SELECT, DELETE ON %I TO reaper', t);
  END LOOP;
  -- No objects of its own, temporary or not, as far as this file can tell: take back any
  -- grant made to reaper itself (what PUBLIC holds is the owner's call, below).
  IF EXISTS (SELECT FROM pg_database d, aclexplode(d.datacl) a
             WHERE d.datname = current_database() AND a.grantee = 'reaper'::regrole) THEN
    EXECUTE format('REVOKE CREATE, TEMPORARY ON DATABASE %I FROM reaper', current_database());
  END IF;
  IF EXISTS (SELECT FROM pg_namespace n, aclexplode(n.nspacl) a
             WHERE n.nspname = 'public' AND a.grantee = 'reaper'::regrole
               AND a.privilege_type = 'CREATE') THEN
    REVOKE CREATE ON SCHEMA public FROM reaper;
  END IF;
  IF has_database_privilege('reaper', current_database(), 'TEMPORARY') THEN
    RAISE NOTICE 'reaper can still create temporary tables: PUBLIC holds TEMPORARY on database %', current_database()
      USING HINT = format('the database owner may run: REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
  END IF;
  IF has_schema_privilege('reaper', 'public', 'CREATE') THEN
    RAISE NOTICE 'reaper can still create tables in schema public: PUBLIC holds CREATE on it'
      USING HINT = 'the schema owner may run: REVOKE CREATE ON SCHEMA public FROM PUBLIC';
  END IF;
END $$;

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
--
-- Whoever runs it, it calls PostgreSQL's own code only: one transaction whose search_path is
-- pg_catalog alone, every function named with its schema, every operator with its schema
-- where a comparison is written. A function or operator that another role planted in public,
-- or in a schema of the caller's search_path, never runs with the rights of the owner or the
-- superuser who runs this file (docs/security.md).

BEGIN;
SET LOCAL search_path = pg_catalog, pg_temp;

DO $$
BEGIN
  IF pg_catalog.to_regrole('reaper') IS NULL THEN
    IF NOT (SELECT r.rolcreaterole OR r.rolsuper FROM pg_catalog.pg_roles AS r
            WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER) THEN
      RAISE EXCEPTION 'role reaper does not exist and % may not create roles', CURRENT_USER
        USING HINT = 'ask an administrator to run: CREATE ROLE reaper LOGIN; then run this file again';
    END IF;
    CREATE ROLE reaper LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
  END IF;
END $$;

DO $$
DECLARE
  -- The schema of the tables: reaper.schema if set, else public.
  s text := coalesce(pg_catalog.current_setting('reaper.schema', true), '');
  db text := pg_catalog.current_database();
  reaper_oid pg_catalog.oid := pg_catalog.to_regrole('reaper');
  t text;
BEGIN
  IF s OPERATOR(pg_catalog.=) '' THEN
    s := 'public';
  END IF;
  IF pg_catalog.to_regnamespace(pg_catalog.quote_ident(s)) IS NULL THEN
    RAISE EXCEPTION 'schema % does not exist in database %', s, db
      USING HINT = 'set reaper.schema to the schema of the control plane''s tables (PGOPTIONS=''-c reaper.schema=NAME'')';
  END IF;
  IF NOT pg_catalog.has_schema_privilege('reaper', s, 'USAGE') THEN
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO reaper', s);
  END IF;
  -- SELECT finds the garbage (the predicates read these tables, including the subqueries:
  -- requests read tokens, tokens read requests); DELETE removes it. Everything else granted
  -- before (an older grants.sql gave UPDATE on the key columns) is taken back: revoking a
  -- table privilege revokes it on every column too.
  FOREACH t IN ARRAY ARRAY['nodes', 'enrollment_requests', 'bootstrap_tokens', 'routers'] LOOP
    EXECUTE pg_catalog.format('REVOKE INSERT, UPDATE, TRUNCATE, REFERENCES, TRIGGER ON %I.%I FROM reaper', s, t);
    EXECUTE pg_catalog.format('GRANT SELECT, DELETE ON %I.%I TO reaper', s, t);
  END LOOP;
  -- No objects of its own, temporary or not, as far as this file can tell: take back any
  -- grant made to reaper itself (what PUBLIC holds is the owner's call, below).
  IF EXISTS (SELECT FROM pg_catalog.pg_database AS d, pg_catalog.aclexplode(d.datacl) AS a
             WHERE d.datname OPERATOR(pg_catalog.=) db
               AND a.grantee OPERATOR(pg_catalog.=) reaper_oid) THEN
    EXECUTE pg_catalog.format('REVOKE CREATE, TEMPORARY ON DATABASE %I FROM reaper', db);
  END IF;
  IF EXISTS (SELECT FROM pg_catalog.pg_namespace AS n, pg_catalog.aclexplode(n.nspacl) AS a
             WHERE n.nspname OPERATOR(pg_catalog.=) s
               AND a.grantee OPERATOR(pg_catalog.=) reaper_oid
               AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE') THEN
    EXECUTE pg_catalog.format('REVOKE CREATE ON SCHEMA %I FROM reaper', s);
  END IF;
  IF pg_catalog.has_database_privilege('reaper', db, 'TEMPORARY') THEN
    RAISE NOTICE 'reaper can still create temporary tables: PUBLIC holds TEMPORARY on database %', db
      USING HINT = pg_catalog.format('the database owner may run: REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', db);
  END IF;
  IF pg_catalog.has_schema_privilege('reaper', s, 'CREATE') THEN
    RAISE NOTICE 'reaper can still create tables in schema %: PUBLIC holds CREATE on it', s
      USING HINT = pg_catalog.format('the schema owner may run: REVOKE CREATE ON SCHEMA %I FROM PUBLIC', s);
  END IF;
  -- Pacing: every session's state in pg_stat_activity, every standby's lag. A role
  -- membership is the cluster's, not this database's: this file only says how.
  IF NOT pg_catalog.pg_has_role('reaper', 'pg_read_all_stats', 'USAGE') THEN
    RAISE NOTICE 'reaper cannot see other sessions and standbys, so it cannot pace its sweeps'
      USING HINT = 'a superuser may run: GRANT pg_read_all_stats TO reaper';
  END IF;
END $$;

COMMIT;

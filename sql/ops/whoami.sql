-- Who reaper is on this server: the role, whether it is a superuser (then privilege checks
-- prove nothing), the server's version number (e.g. 150004), and whether the role can create
-- objects of its own: temporary tables (TEMPORARY on the database, PUBLIC's by default) or
-- tables in schema public (PUBLIC's by default before PostgreSQL 15).
SELECT current_user::text AS role_name,
       coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false) AS superuser,
       current_setting('server_version_num')::int AS server_version,
       has_database_privilege(current_database(), 'TEMPORARY') AS can_create_temp,
       coalesce(has_schema_privilege(to_regnamespace('public')::oid, 'CREATE'), false)
         AS can_create_in_public,
       current_database()::text AS database

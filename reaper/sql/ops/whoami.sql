-- Who reaper is on this server: the role, whether it is a superuser (then privilege checks
-- prove nothing), and the server's version number (e.g. 150004).
SELECT current_user::text AS role_name,
       coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false) AS superuser,
       current_setting('server_version_num')::int AS server_version

-- Readiness: why the server would refuse reaper's deletes now (NULL: it accepts them), and
-- whether this session's default_transaction_read_only is stale: an ALTER DATABASE/ROLE ...
-- SET (or RESET) since it connected, which only new sessions see (the pool then renews its
-- connections). The settings of pg_db_role_setting apply in this order: database and role,
-- then role, then database; with none, the server's configuration, which every session sees.
WITH configured AS (
    SELECT split_part(cfg, '=', 2)::boolean AS read_only
    FROM pg_db_role_setting AS s
    CROSS JOIN LATERAL unnest(s.setconfig) AS cfg
    WHERE cfg LIKE 'default\_transaction\_read\_only=%'
      AND s.setdatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
      AND s.setrole IN (0, (SELECT oid FROM pg_roles WHERE rolname = session_user))
    ORDER BY (s.setdatabase <> 0 AND s.setrole <> 0) DESC, (s.setrole <> 0) DESC
    LIMIT 1
), mine AS (
    SELECT setting::boolean AS read_only, source
    FROM pg_settings
    WHERE name = 'default_transaction_read_only'
)
SELECT CASE
           WHEN pg_is_in_recovery() THEN
               'the server is a standby (in recovery): it refuses writes'
           WHEN (SELECT reset_val::boolean FROM pg_settings
                 WHERE name = 'default_transaction_read_only')
                OR coalesce((SELECT read_only FROM configured), false) THEN
               'the database refuses writes: default_transaction_read_only is on '
               '(ALTER DATABASE or ALTER ROLE ... SET, or the server''s configuration)'
       END,
       CASE
           WHEN EXISTS (SELECT FROM configured) THEN
               (SELECT read_only FROM configured) IS DISTINCT FROM (SELECT read_only FROM mine)
           ELSE (SELECT source FROM mine) IN ('database', 'user', 'database user')
       END

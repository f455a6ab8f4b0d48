-- The owner of table %(table)s, and whether reaper's role is it or a member of it (then it may
-- do anything to the table, whatever grants.sql says).
SELECT pg_get_userbyid(c.relowner)::text AS owner,
       pg_has_role(c.relowner, 'USAGE') AS acts_as_owner
FROM pg_class c
WHERE c.oid = to_regclass(%(table)s)

-- The role reaper connects as (README, "Deployment"): it reads and deletes rows of the swept
-- tables. Each batch picks its rows with SELECT ... FOR UPDATE SKIP LOCKED, which PostgreSQL
-- allows only with UPDATE on at least one column: hence UPDATE on the key column alone
-- (reaper never updates a row). Run it in the control plane's database as a superuser or the
-- tables' owner, then give the role a password:
--   psql -v ON_ERROR_STOP=1 -d control -f deploy/reaper-role.sql
--   psql -d control -c "\password reaper"
-- tests/test_deploy.py runs these statements on the reference schema and sweeps as that role.
CREATE ROLE reaper LOGIN;
GRANT SELECT, DELETE ON nodes, enrollment_requests, bootstrap_tokens, routers TO reaper;
GRANT UPDATE (peer_id) ON nodes TO reaper;
GRANT UPDATE (id) ON enrollment_requests TO reaper;
GRANT UPDATE (id) ON bootstrap_tokens TO reaper;
GRANT UPDATE (router_id) ON routers TO reaper;

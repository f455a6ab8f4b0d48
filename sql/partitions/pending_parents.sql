-- The parents (pg_class oids) among %(parents)s that have a partition left detach-pending
-- now: PostgreSQL allows one pending detach per parent, so no other partition of theirs can
-- be detached until it is finished (FINALIZE, once older snapshots end).
SELECT DISTINCT i.inhparent::bigint
FROM pg_catalog.pg_inherits i
WHERE i.inhdetachpending AND i.inhparent = ANY (%(parents)s::pg_catalog.oid[])

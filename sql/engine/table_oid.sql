-- The swept table's oid: the interlock's ledger keys a table by it, so that two sweeps that
-- name one table differently (nodes, public.nodes) share one window.
SELECT %(table)s::regclass::oid::text

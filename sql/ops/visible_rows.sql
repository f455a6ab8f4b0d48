-- Whether row-level security filters what the connected role reads of one heap
-- (row_security_active), the catalog's estimate of its rows (pg_class.reltuples, -1: never
-- analyzed) and its heap blocks now. %(heap)s is the heap's pg_class oid.
SELECT row_security_active(c.oid) AS filtered,
       c.reltuples::bigint AS estimated_rows,
       (pg_relation_size(c.oid) / current_setting('block_size')::int)::bigint AS blocks
FROM pg_class c
WHERE c.oid = %(heap)s::oid

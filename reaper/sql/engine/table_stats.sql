-- A table's size from the catalog (never COUNT(*)): estimated rows (-1 when never analyzed),
-- heap blocks now, and whether it is a partitioned table (whose own heap is empty: its rows
-- live in the partitions). %(table)s is a regclass name, quoted parts (reaper.db).
SELECT c.reltuples::bigint AS estimated_rows,
       c.relpages::bigint AS analyzed_blocks,
       (pg_relation_size(c.oid) / current_setting('block_size')::int)::bigint AS blocks,
       c.relkind = 'p' AS partitioned
FROM pg_class c
WHERE c.oid = %(table)s::regclass

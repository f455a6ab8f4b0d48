-- A table's primary key columns, in the key's order (none: it has no primary key). A
-- partitioned table's key is its own pg_index row (indrelid is the parent). Dropped columns
-- cannot be in a key.
SELECT a.attname::text AS column_name
FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
WHERE i.indrelid = %(table)s::regclass AND i.indisprimary
ORDER BY array_position(i.indkey::int2[], a.attnum)

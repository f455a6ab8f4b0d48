-- The foreign keys that point at a table, so that deleting from it makes PostgreSQL look up
-- the referencing rows; and whether a valid, ready, non-partial index leads with the
-- referencing columns (in any order). Without one, every deleted parent row scans the child.
SELECT c.conname AS constraint_name,
       regexp_replace(c.conrelid::regclass::text, '^public\.', '') AS referencing_table,
       ARRAY(SELECT a.attname::text
             FROM unnest(c.conkey) WITH ORDINALITY AS k (attnum, ord)
             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
             ORDER BY k.ord) AS columns,
       EXISTS (
           SELECT 1 FROM pg_index i
           WHERE i.indrelid = c.conrelid
             AND i.indisvalid AND i.indisready AND i.indpred IS NULL
             AND (string_to_array(i.indkey::text, ' ')::int2[])[1:cardinality(c.conkey)]
                 @> c.conkey
             AND (string_to_array(i.indkey::text, ' ')::int2[])[1:cardinality(c.conkey)]
                 <@ c.conkey
       ) AS indexed
FROM pg_constraint c
WHERE c.contype = 'f' AND c.confrelid = to_regclass(%(table)s)
ORDER BY 1

-- One batch served by the predicate's index: at most %(batch_size)s victims, locked without
-- waiting, then deleted by their tuple ids. For a few garbage rows scattered through a large
-- table; the heap walk takes over when garbage is a large part of the table.
WITH victims AS MATERIALIZED (
    SELECT ctid FROM {table}
    WHERE ({predicate})
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {table}
WHERE ctid = ANY (ARRAY(SELECT ctid FROM victims))

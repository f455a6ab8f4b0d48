-- What makes dropping a partition of %(table)s (a regclass name) differ from deleting its
-- rows one by one, as one line each (none: a drop removes exactly what the deletes would):
-- a foreign key that references the table or one of its partitions (a delete would cascade,
-- restrict or set null; a detach fails or skips that), a DELETE trigger (a drop fires none),
-- a rule ON DELETE, row-level security (a delete removes only the rows its policies show),
-- and a publication that replicates deletes (a subscriber would keep the rows of a dropped
-- partition).
WITH RECURSIVE tree AS (
    SELECT %(table)s::regclass::oid AS relid
    UNION ALL
    SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.relid
)
SELECT format('foreign key %%s of %%s references it', con.conname, con.conrelid::regclass)
FROM pg_constraint con
WHERE con.contype = 'f' AND con.confrelid IN (SELECT relid FROM tree)
UNION ALL
SELECT format('trigger %%s on %%s fires on DELETE', tg.tgname, tg.tgrelid::regclass)
FROM pg_trigger tg
WHERE tg.tgrelid IN (SELECT relid FROM tree) AND NOT tg.tgisinternal
  AND tg.tgtype::int & 8 <> 0 AND tg.tgenabled <> 'D'
UNION ALL
SELECT format('rule %%s on %%s rewrites DELETE', r.rulename, r.ev_class::regclass)
FROM pg_rewrite r
WHERE r.ev_class IN (SELECT relid FROM tree) AND r.ev_type = '4'
UNION ALL
SELECT format('row-level security is enabled on %%s', c.oid::regclass)
FROM pg_class c
WHERE c.oid IN (SELECT relid FROM tree) AND c.relrowsecurity
UNION ALL
SELECT format('publication %%s replicates its deletes', pub.pubname)
FROM pg_publication pub
WHERE pub.pubdelete AND EXISTS (
    SELECT 1 FROM pg_publication_tables pt
    JOIN pg_namespace n ON n.nspname = pt.schemaname
    JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
    WHERE pt.pubname = pub.pubname AND c.oid IN (SELECT relid FROM tree)
)

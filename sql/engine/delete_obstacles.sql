-- What can keep a DELETE on one heap from removing the rows it names, as the catalog tells
-- it for the connected role; one row per cause (kind, name, detail):
-- - trigger: an enabled BEFORE DELETE row trigger (pg_trigger.tgtype bits ROW 1, BEFORE 2,
--   DELETE 8). One that returns NULL keeps the row, and may write instead (a soft delete);
--   whether it ever does cannot be read from the catalog, so every such trigger is named.
-- - rule: a rule ON DELETE (pg_rewrite.ev_type '4'), which rewrites the DELETE.
-- - policy: row-level security that applies to the role (row_security_active: enabled, the
--   role neither owns the table nor has BYPASSRLS, or FORCE) where the policies that let it
--   DELETE differ from the ones that let it SELECT: a batch selects rows its DELETE cannot
--   reach. The policies named are those that apply to DELETE.
-- %(heap)s is the heap's pg_class oid.
WITH heap AS (
    SELECT format('%%I.%%I', n.nspname, c.relname) AS name
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = %(heap)s::oid
), policies AS (
    SELECT p.polname::text AS name, p.polcmd, p.polpermissive,
           coalesce(pg_get_expr(p.polqual, p.polrelid), 'true') AS qual
    FROM pg_policy p
    WHERE p.polrelid = %(heap)s::oid
      AND (0::oid = ANY (p.polroles)
           OR EXISTS (SELECT 1 FROM unnest(p.polroles) AS r (oid)
                      WHERE pg_has_role(current_user, r.oid, 'USAGE')))
), reads AS (
    SELECT coalesce(array_agg(polpermissive::text || ':' || qual ORDER BY polpermissive, qual),
                    '{}') AS quals
    FROM policies WHERE polcmd IN ('r', '*')
), deletes AS (
    SELECT coalesce(array_agg(polpermissive::text || ':' || qual ORDER BY polpermissive, qual),
                    '{}') AS quals,
           coalesce(string_agg(name, ', ' ORDER BY name), '') AS names
    FROM policies WHERE polcmd IN ('d', '*')
)
SELECT 'trigger' AS kind, t.tgname::text AS name,
       format('BEFORE DELETE row trigger %%I on %%s (function %%I.%%I)',
              t.tgname, h.name, fn.nspname, f.proname) AS detail
FROM pg_trigger t
CROSS JOIN heap h
JOIN pg_proc f ON f.oid = t.tgfoid
JOIN pg_namespace fn ON fn.oid = f.pronamespace
WHERE t.tgrelid = %(heap)s::oid AND NOT t.tgisinternal AND t.tgenabled IN ('O', 'A')
  AND t.tgtype & 1 = 1 AND t.tgtype & 2 = 2 AND t.tgtype & 8 = 8
UNION ALL
SELECT 'rule', r.rulename::text, format('rule %%I ON DELETE on %%s', r.rulename, h.name)
FROM pg_rewrite r CROSS JOIN heap h
WHERE r.ev_class = %(heap)s::oid AND r.ev_type = '4'
UNION ALL
SELECT 'policy', d.names,
       format('row-level security on %%s applies to role %%I (no BYPASSRLS) and its DELETE '
              'policies (%%s) do not match its SELECT policies',
              h.name, current_user, CASE WHEN d.names = '' THEN 'none' ELSE d.names END)
FROM reads s, deletes d, heap h
WHERE row_security_active(%(heap)s::oid) AND s.quals IS DISTINCT FROM d.quals
ORDER BY 1, 2

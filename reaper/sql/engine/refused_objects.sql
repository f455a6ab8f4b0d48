-- What a declared predicate names that is not allowed: every function, operator, cast type and
-- subquery relation it names (one that does not exist fails when the statement runs), resolved as the session resolves names (every candidate on the
-- search path counts, so a user function that shadows a built-in one is refused too). Allowed:
-- built in (created by initdb: oid < 16384, FirstNormalObjectId) in pg_catalog, immutable or
-- stable, not SECURITY DEFINER, a plain function or an aggregate; an operator whose function is
-- allowed; a cast to a built-in type; a subquery over a table (a view runs its owner's code, a
-- foreign table reaches another server). One row per refused object: what, why.
SELECT format('function %%s', p.oid::regprocedure) AS what, v.why
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
CROSS JOIN LATERAL (SELECT CASE
    WHEN p.oid >= 16384 OR n.nspname <> 'pg_catalog' THEN 'is not built in (pg_catalog)'
    WHEN p.prosecdef THEN 'is SECURITY DEFINER'
    WHEN p.provolatile = 'v' THEN 'is volatile (it may write or have side effects)'
    WHEN p.prokind NOT IN ('f', 'a') THEN 'is a procedure or a window function'
END AS why) v
WHERE p.proname = ANY (%(functions)s::name[])
  AND n.oid IN (SELECT oid FROM pg_namespace WHERE nspname = ANY (current_schemas(true)))
  AND v.why IS NOT NULL
UNION ALL
SELECT format('operator %%s', o.oid::regoperator),
       CASE WHEN o.oid >= 16384 OR n.nspname <> 'pg_catalog' THEN 'is not built in (pg_catalog)'
            ELSE 'runs function ' || o.oprcode::regprocedure::text || ', which ' || v.why END
FROM pg_operator o
JOIN pg_namespace n ON n.oid = o.oprnamespace
-- One index lookup per operator (a hash join would read all of pg_proc).
LEFT JOIN LATERAL (
    SELECT CASE
        WHEN p.oid >= 16384 OR pn.nspname <> 'pg_catalog' THEN 'is not built in (pg_catalog)'
        WHEN p.prosecdef THEN 'is SECURITY DEFINER'
        WHEN p.provolatile = 'v' THEN 'is volatile (it may write or have side effects)'
    END AS why
    FROM pg_proc p JOIN pg_namespace pn ON pn.oid = p.pronamespace
    WHERE p.oid = o.oprcode
    OFFSET 0
) v ON true
WHERE o.oprname = ANY (%(operators)s::name[])
  AND n.oid IN (SELECT oid FROM pg_namespace WHERE nspname = ANY (current_schemas(true)))
  AND (o.oid >= 16384 OR n.nspname <> 'pg_catalog' OR v.why IS NOT NULL)
UNION ALL
SELECT format('type %%s', t.name), 'is not a built-in type (a domain''s CHECK can run code)'
FROM unnest(%(types)s::text[]) AS t(name)
WHERE to_regtype(t.name)::oid >= 16384
UNION ALL
SELECT format('relation %%s', r.name),
       'is not a table (a view runs its owner''s code; a foreign table reaches another server)'
FROM unnest(%(relations)s::text[]) AS r(name)
JOIN pg_class c ON c.oid = to_regclass(r.name)
WHERE c.relkind NOT IN ('r', 'p', 'm')

-- What a declared predicate names that is not allowed: every function, operator, cast type and
-- subquery relation it names (one that does not exist fails when the statement runs), resolved
-- as the session resolves names (every candidate on the search path counts, so a user function
-- that shadows a built-in one is refused too). Allowed: built in (created by initdb: oid <
-- 16384, FirstNormalObjectId) in pg_catalog, immutable or stable, not SECURITY DEFINER, a plain
-- function or an aggregate; an operator whose function is allowed; a cast to a built-in type; a
-- subquery over a table (a view runs its owner's code, a foreign table reaches another server).
-- Every column the predicate reads (of the swept table or a subquery's relations; all of their
-- columns for `*` or a whole-row reference) is of a built-in type that is not a domain, so no
-- value of a user type can reach an operator, function or cast. Therefore a non-built-in
-- function or operator candidate counts only when each argument it requires could take a
-- built-in value (a built-in or pseudo type, a domain, or a type with an implicit cast from a
-- built-in type); and any cast between such types that runs a non-built-in function is
-- refused (an implicit cast applies without being written). One row per refused object.
WITH applicable AS (
    -- Types a built-in value can be passed as: built in, domains (a base value coerces to
    -- them), arrays of those (an array coerces element by element), or the target of an
    -- implicit cast from a built-in type.
    SELECT t.oid FROM pg_type t
    WHERE t.oid < 16384 OR t.typtype = 'd'
       OR t.typcategory = 'A' AND EXISTS (SELECT FROM pg_type e
                                         WHERE e.oid = t.typelem
                                           AND (e.oid < 16384 OR e.typtype = 'd'))
       OR EXISTS (SELECT FROM pg_cast c
                  WHERE c.casttarget = t.oid AND c.castsource < 16384 AND c.castcontext = 'i')
)
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
  AND (p.oid < 16384 AND n.nspname = 'pg_catalog'
       OR NOT EXISTS (SELECT FROM generate_series(0, p.pronargs - p.pronargdefaults - 1) i
                      WHERE p.proargtypes[i] NOT IN (SELECT oid FROM applicable)))
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
  AND (o.oid < 16384 AND n.nspname = 'pg_catalog' AND v.why IS NOT NULL
       OR (o.oid >= 16384 OR n.nspname <> 'pg_catalog')
          AND (o.oprleft = 0 OR o.oprleft IN (SELECT oid FROM applicable))
          AND (o.oprright = 0 OR o.oprright IN (SELECT oid FROM applicable)))
UNION ALL
SELECT format('type %%s', t.name), 'is not a built-in type (a domain''s CHECK can run code)'
FROM unnest(%(types)s::text[]) AS t(name)
WHERE to_regtype(t.name)::oid >= 16384
   OR (SELECT typtype FROM pg_type WHERE oid = to_regtype(t.name)) = 'd'
UNION ALL
SELECT format('column %%s.%%I', c.oid::regclass, a.attname),
       format('is of type %%s, which is not a built-in type (a user type''s casts, operators '
              'and domain CHECKs run user code)', format_type(a.atttypid, a.atttypmod))
FROM unnest(%(relations)s::text[] || %(table)s::text) AS r(name)
JOIN pg_class c ON c.oid = to_regclass(r.name)
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type ty ON ty.oid = a.atttypid
WHERE (%(all_columns)s OR a.attname = ANY (%(columns)s::name[]))
  AND (ty.oid >= 16384 OR ty.typtype = 'd')
UNION ALL
SELECT format('cast (%%s AS %%s)', c.castsource::regtype, c.casttarget::regtype),
       'runs function ' || c.castfunc::regprocedure::text || ', which is not built in (an '
       'implicit cast applies without being written)'
FROM pg_cast c
JOIN pg_proc p ON p.oid = c.castfunc
JOIN pg_namespace pn ON pn.oid = p.pronamespace
WHERE (p.oid >= 16384 OR pn.nspname <> 'pg_catalog')
  AND c.castsource IN (SELECT oid FROM applicable)
  AND c.casttarget IN (SELECT oid FROM applicable)
UNION ALL
SELECT format('relation %%s', r.name),
       'is not a table (a view runs its owner''s code; a foreign table reaches another server)'
FROM unnest(%(relations)s::text[]) AS r(name)
JOIN pg_class c ON c.oid = to_regclass(r.name)
WHERE c.relkind NOT IN ('r', 'p', 'm')

-- What a declared sweep's predicate reads, pair by pair (relation, column): the relation's
-- kind (NULL: no such relation), whether the column exists, and whether its type is built
-- in (created by initdb, oid below FirstNormalObjectId 16384), a domain counting as its base
-- type. reaper.db refuses a relation that is no table (a view runs its owner's code) and a
-- column of any other type (an implicit cast of a user type runs the cast's function when
-- the column meets a pg_catalog operator). A missing column is left to the statement, which
-- fails on it: an unqualified name is a column or nothing.
-- %(relations)s are regclass names, quoted parts (reaper.db); %(columns)s column names.
SELECT r.relation::text AS relation,
       r.column_name::text AS column_name,
       c.relkind::text AS relkind,
       a.attname IS NOT NULL AS present,
       coalesce(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END < 16384, true)
           AS builtin_type,
       coalesce(format_type(a.atttypid, a.atttypmod), '') AS type_name
FROM unnest(%(relations)s::text[], %(columns)s::text[]) AS r (relation, column_name)
LEFT JOIN pg_class c ON c.oid = to_regclass(r.relation)
LEFT JOIN pg_attribute a
       ON a.attrelid = c.oid AND a.attname = r.column_name AND a.attnum > 0
      AND NOT a.attisdropped
LEFT JOIN pg_type t ON t.oid = a.atttypid

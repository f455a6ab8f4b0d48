-- Whether the current role holds each privilege on each table. Row locks (FOR UPDATE SKIP
-- LOCKED) need UPDATE on at least one column, hence has_any_column_privilege for UPDATE.
-- Tables that do not exist are left out (the table check reports them).
SELECT r.table_name, r.privilege,
       CASE WHEN r.privilege = 'UPDATE'
            THEN has_any_column_privilege(r.table_name, 'UPDATE')
            ELSE has_table_privilege(r.table_name, r.privilege) END AS granted
FROM unnest(%(tables)s::text[], %(privileges)s::text[]) WITH ORDINALITY
     AS r (table_name, privilege, ord)
WHERE to_regclass(r.table_name) IS NOT NULL
ORDER BY r.ord

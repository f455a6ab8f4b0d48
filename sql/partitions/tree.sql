-- Every partition below %(table)s (a regclass name; none when no such table), at every level, with what the proof of
-- partition retention needs (docs/partitions.md): its parent's partition key (strategy,
-- number of columns, the one column's name and type), its bound as PostgreSQL prints it,
-- whether that bound's upper end lies at or below %(cutoff)s, its estimated rows and heap
-- bytes (0 for a partitioned one: its rows are in its partitions), and whether
-- the current role may detach and drop it (a member of the owners of it and its parent).
-- %(column)s is the column the predicate bounds (NULL: nothing is proven, expired is NULL).
-- Runs in the sweep's own session, so bounds print and parse under the same TimeZone and
-- DateStyle, and the comparison with the cutoff is the one the batches make (col < cutoff).
WITH RECURSIVE tree AS (
    SELECT i.inhrelid AS relid, i.inhparent AS parent, i.inhdetachpending AS detach_pending,
           1 AS level
    FROM pg_inherits i
    JOIN pg_class root ON root.oid = i.inhparent AND root.relkind = 'p'
    WHERE i.inhparent = to_regclass(%(table)s)
    UNION ALL
    SELECT i.inhrelid, i.inhparent, i.inhdetachpending, t.level + 1
    FROM pg_inherits i
    JOIN tree t ON i.inhparent = t.relid
),
described AS (
    SELECT t.relid, t.parent, t.detach_pending, t.level,
           n.nspname::text AS schema_name, c.relname::text AS relname, c.relkind::text AS kind,
           c.reltuples::bigint AS estimated_rows, pg_relation_size(c.oid) AS heap_bytes,
           pn.nspname::text AS parent_schema, p.relname::text AS parent_name,
           pt.partstrat::text AS strategy, pt.partnatts::int AS key_columns,
           a.attname::text AS key_column, a.atttypid AS key_type,
           pg_get_expr(c.relpartbound, c.oid) AS bound,
           pg_has_role(c.relowner, 'USAGE') AND pg_has_role(p.relowner, 'USAGE') AS owned,
           pt.partdefid <> 0 AS parent_has_default
    FROM tree t
    JOIN pg_class c ON c.oid = t.relid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_class p ON p.oid = t.parent
    JOIN pg_namespace pn ON pn.oid = p.relnamespace
    JOIN pg_partitioned_table pt ON pt.partrelid = t.parent
    LEFT JOIN pg_attribute a
           ON a.attrelid = t.parent AND pt.partnatts = 1 AND a.attnum = pt.partattrs[0]
),
bounded AS (
    SELECT d.*,
           d.bound = 'DEFAULT' AS is_default,
           replace((regexp_match(d.bound, ' TO \(''((?:[^'']|'''')*)''\)$'))[1], '''''', '''')
               AS upper_text,
           -- A timestamp or date becomes a timestamptz under the session's TimeZone, which
           -- need not be monotonic (a local time inside a spring-forward gap lands after
           -- the end of the gap): outside UTC, the upper bound read as UTC must also be at
           -- least 16 hours (more than any UTC offset PostgreSQL accepts) before the cutoff.
           current_setting('TimeZone') IN (
               'UTC', 'Etc/UTC', 'UCT', 'Etc/UCT', 'GMT', 'Etc/GMT', 'GMT0', 'Etc/GMT0',
               'Universal', 'Etc/Universal', 'Zulu', 'Etc/Zulu', 'Greenwich', 'Etc/Greenwich'
           ) AS utc_session
    FROM described d
)
SELECT b.relid::bigint AS relid, b.parent::bigint AS parent, b.level, b.schema_name, b.relname,
       b.kind, b.estimated_rows, b.heap_bytes, b.parent_schema, b.parent_name, b.strategy, b.key_columns,
       b.key_column, format_type(b.key_type, NULL) AS key_type, b.bound, b.is_default,
       b.detach_pending, b.owned, b.parent_has_default,
       CASE WHEN b.strategy = 'r' AND b.key_columns = 1 AND b.key_column = %(column)s
                 AND NOT b.is_default AND b.upper_text IS NOT NULL
                 AND %(cutoff)s::timestamptz IS NOT NULL THEN
           CASE b.key_type
               WHEN 'timestamptz'::regtype THEN
                   b.upper_text::timestamptz <= %(cutoff)s::timestamptz
               WHEN 'timestamp'::regtype THEN
                   b.upper_text::timestamp <= %(cutoff)s::timestamptz
                   AND (b.utc_session OR (b.upper_text::timestamp AT TIME ZONE 'UTC')
                                         + interval '16 hours' <= %(cutoff)s::timestamptz)
               WHEN 'date'::regtype THEN
                   b.upper_text::date <= %(cutoff)s::timestamptz
                   AND (b.utc_session OR (b.upper_text::date::timestamp AT TIME ZONE 'UTC')
                                         + interval '16 hours' <= %(cutoff)s::timestamptz)
               ELSE false
           END
       END AS expired
FROM bounded b
ORDER BY b.level, b.upper_text IS NULL, b.relname

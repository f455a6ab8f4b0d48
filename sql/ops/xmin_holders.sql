-- What holds back the xmin horizon of this database's tables: a VACUUM removes no row that a
-- transaction deleted after the oldest snapshot still needed began. The oldest holder of each
-- kind, oldest first, from the statistics views and the catalog alone:
--   transaction           a session of this database (its backend_xid or backend_xmin); its
--                         transaction start and state are NULL where the role may not see them
--                         (another role's session, without pg_read_all_stats);
--   prepared_transaction  a PREPARE TRANSACTION of this database not yet committed or rolled back;
--   replication_slot      a slot's xmin (a standby's hot_standby_feedback through a physical
--                         slot); a logical slot's catalog_xmin holds only the system catalogs;
--   standby               a standby's hot_standby_feedback without a slot (the xmin of its
--                         WAL sender in pg_stat_replication).
-- This session itself is left out; so are background processes (autovacuum's own snapshot does
-- not hold the horizon) and the WAL senders, which appear as standbys.
SELECT DISTINCT ON (kind) kind, name, xmin_age, since, user_name, application_name, state
FROM (
    SELECT 'transaction' AS kind, a.pid::text AS name,
           greatest(age(a.backend_xid), age(a.backend_xmin))::bigint AS xmin_age,
           a.xact_start AS since, a.usename::text AS user_name,
           a.application_name::text AS application_name, a.state::text AS state
    FROM pg_stat_activity a
    WHERE a.datname = current_database()
      AND a.pid <> pg_backend_pid()
      AND a.usesysid IS NOT NULL
      AND coalesce(a.backend_xid, a.backend_xmin) IS NOT NULL
      AND a.pid NOT IN (SELECT r.pid FROM pg_stat_replication r WHERE r.pid IS NOT NULL)
    UNION ALL
    SELECT 'prepared_transaction', p.gid, age(p.transaction)::bigint, p.prepared,
           p.owner::text, NULL, NULL
    FROM pg_prepared_xacts p
    WHERE p.database = current_database()
    UNION ALL
    SELECT 'replication_slot', s.slot_name::text, age(s.xmin)::bigint, NULL, NULL, NULL,
           CASE WHEN s.active THEN 'active' ELSE 'inactive' END
    FROM pg_replication_slots s
    WHERE s.xmin IS NOT NULL AND (s.database IS NULL OR s.database = current_database())
    UNION ALL
    SELECT 'standby', coalesce(nullif(r.application_name, ''), r.pid::text),
           age(r.backend_xmin)::bigint, NULL, NULL, r.application_name::text, r.state::text
    FROM pg_stat_replication r
    WHERE r.backend_xmin IS NOT NULL
) AS h
ORDER BY kind, xmin_age DESC, since NULLS LAST

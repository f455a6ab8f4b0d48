-- A mark past every commit of this session so far (the WAL insert position now), and whether
-- %(lsn)s, an earlier mark (NULL: none), is durable: flushed to the server's WAL, and to
-- that of every physical standby streaming from it that reports its flush position (one a
-- failover could promote). A commit made with synchronous_commit off is durable once so.
SELECT pg_catalog.pg_current_wal_insert_lsn()::text AS mark,
       %(lsn)s::pg_catalog.pg_lsn IS NULL OR (
           pg_catalog.pg_current_wal_flush_lsn() >= %(lsn)s::pg_catalog.pg_lsn
           AND NOT EXISTS (
               SELECT FROM pg_catalog.pg_stat_replication r
               WHERE r.flush_lsn < %(lsn)s::pg_catalog.pg_lsn
                 AND NOT EXISTS (SELECT FROM pg_catalog.pg_replication_slots s
                                 WHERE s.active_pid = r.pid AND s.slot_type = 'logical'))
       ) AS durable

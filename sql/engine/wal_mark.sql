-- A mark past every commit of this session so far (the WAL insert position now, on this
-- server incarnation: its postmaster's start time), and whether %(lsn)s, an earlier mark
-- (NULL: none) made on incarnation %(started)s, is durable: flushed to this server's WAL, and
-- to that of every physical standby streaming from it that reports its flush position (one a
-- failover could promote). A commit made with synchronous_commit off is durable once so. A
-- mark of another incarnation (the server restarted, crashed, or is another one after a
-- failover) is not comparable: same_server is false.
SELECT pg_catalog.pg_current_wal_insert_lsn()::text AS mark,
       pg_catalog.pg_postmaster_start_time()::text AS started,
       %(started)s::pg_catalog.timestamptz IS NULL
           OR pg_catalog.pg_postmaster_start_time() = %(started)s::pg_catalog.timestamptz
           AS same_server,
       %(lsn)s::pg_catalog.pg_lsn IS NULL OR (
           pg_catalog.pg_postmaster_start_time() = %(started)s::pg_catalog.timestamptz
           AND pg_catalog.pg_current_wal_flush_lsn() >= %(lsn)s::pg_catalog.pg_lsn
           AND NOT EXISTS (
               SELECT FROM pg_catalog.pg_stat_replication r
               WHERE r.flush_lsn < %(lsn)s::pg_catalog.pg_lsn
                 AND NOT EXISTS (SELECT FROM pg_catalog.pg_replication_slots s
                                 WHERE s.active_pid = r.pid AND s.slot_type = 'logical'))
       ) AS durable

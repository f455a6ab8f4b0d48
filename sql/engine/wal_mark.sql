-- A mark past every commit of this session so far (the WAL insert position now, on this
-- server incarnation: its postmaster's start time), and whether %(lsn)s, an earlier mark
-- (NULL: none) made on incarnation %(started)s, is durable: flushed to this server's WAL, and
-- to that of every physical standby streaming from it that reports its flush position (one a
-- failover could promote). A commit made with synchronous_commit off is durable once so. A
-- mark of another incarnation (the server restarted, crashed, or is another one after a
-- failover) is not comparable: same_server is false.
--
-- The insert position just past a page header (24 or 40 bytes into a page) is taken as the
-- page's start: no record ends inside a header, and an idle server flushes up to the page's
-- start only, so such a mark would otherwise wait for WAL that nobody writes.
WITH w AS (
    SELECT pg_catalog.pg_current_wal_insert_lsn() - '0/0'::pg_catalog.pg_lsn AS pos,
           pg_catalog.current_setting('wal_block_size')::pg_catalog.int4 AS page
), m AS (
    SELECT CASE WHEN pg_catalog.mod(w.pos, w.page) IN (24, 40)
                THEN w.pos - pg_catalog.mod(w.pos, w.page) ELSE w.pos END AS pos
    FROM w
)
SELECT pg_catalog.to_hex(pg_catalog.div(m.pos, 4294967296)::pg_catalog.int8) || '/'
           || pg_catalog.to_hex(pg_catalog.mod(m.pos, 4294967296)::pg_catalog.int8) AS mark,
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
FROM m

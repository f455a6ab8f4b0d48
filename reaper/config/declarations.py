"""Every setting, declared once: its value type, default and help (:class:`Setting`).

The settings a ``[sweeps.NAME]`` table may set for one sweep are those of :class:`PerSweep`:
each is also an attribute of every resolved :class:`reaper.config.sweeps.Sweep` (its own
value, else the global one). :class:`Settings` holds them all. To add a setting, declare it
here; docs/contributing.md says how.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import time, timedelta
from typing import Any

from reaper.config.setting import Declared, Setting, Values
from reaper.config.sweeptable import SweepSettings
from reaper.config.values import (
    ANY_TIME,
    boolean,
    client_seconds,
    dsn_text,
    fraction,
    listen_address,
    non_negative_int,
    optional_byte_rate,
    optional_interval,
    optional_positive_duration,
    optional_positive_int,
    optional_str,
    partition_action_name,
    positive_duration,
    positive_int,
    schema_name,
    server_duration,
    share,
    strategy_name,
    time_zone,
)
from reaper.errors import ConfigError
from reaper.vocab import PartitionAction, Strategy

# Defaults. Retentions come from the control plane's own rules: a session lives 72 h after it
# lapses (long enough to see why it lapsed), a silent bootstrap member 30 days, an ephemeral
# member an hour (CI runners and scale tests re-enroll, they never come back).
DEFAULT_SESSION_RETENTION = timedelta(hours=72)
DEFAULT_NODE_RETENTION = timedelta(days=30)
DEFAULT_EPHEMERAL_NODE_RETENTION = timedelta(hours=1)
# Rows per batch (the heap walk's cap per range, the index path's LIMIT); bench B1 figures
# in docs/performance.md ("The engine's numbers").
DEFAULT_BATCH_SIZE = 20_000
# A heap-walk batch aims at this long; half the 100 ms p99 ceiling (docs/performance.md).
DEFAULT_BATCH_TARGET_SECONDS = 0.05
# A heap walk runs on at most this many connections at once while the database is idle.
# One: on the 2-core benchmark machine, shared with other work, two connections were 0.55x
# one in some runs and no faster in others, and bench B4 was not shown met at two
# (docs/performance.md, "Parallel heap ranges").
DEFAULT_PARALLEL = 1
# ... and never on more than this many: each is a server process busy deleting.
MAX_PARALLEL = 16
# A batch statement that runs longer than this is cancelled: a sweep never holds locks long.
DEFAULT_STATEMENT_TIMEOUT = timedelta(seconds=10)
# How long a batch may wait for a lock: a table lock (a migration's ACCESS EXCLUSIVE, say) or a
# row a writer holds (batches take no row lock of their own; the delete waits for the writer).
DEFAULT_LOCK_TIMEOUT = timedelta(seconds=1)
DEFAULT_IDLE_IN_TRANSACTION_SESSION_TIMEOUT = timedelta(seconds=60)
# Walk the heap at this garbage fraction or more: the crossover of bench --crossover
# (docs/performance.md, "The engine's numbers").
DEFAULT_HEAP_WALK_THRESHOLD = 0.02
DEFAULT_CONNECT_TIMEOUT = timedelta(seconds=10)
# `reaper check`: a batch plan that reads a table of more rows than this sequentially fails.
# 10,000 rows is ~100 heap blocks, a millisecond of scan; below that the planner rightly
# prefers a scan to an index, above it a scan per batch grows with the table (DESIGN.md).
DEFAULT_SEQ_SCAN_MAX_ROWS = 10_000
# How often `reaper run` repeats the checks it runs at startup: an index a migration dropped,
# or left INVALID, is noticed within the hour.
DEFAULT_CHECK_INTERVAL = timedelta(hours=1)
# The daemon (`reaper run`): one port for /metrics, /healthz and /readyz. Loopback by default:
# the port tells table names, sizes and the database's health to whoever asks, so exposing it
# is the operator's choice (`--listen :9465`, as the deployment manifests do, behind a
# NetworkPolicy or a firewall). The deployment manifests and alert rules use 9465.
DEFAULT_LISTEN = "127.0.0.1:9465"
# Kubernetes sends SIGKILL 30 s after SIGTERM by default; 10 s leaves room for the pod's other
# containers and is 10x the default lock_timeout, the longest a healthy batch waits.
DEFAULT_SHUTDOWN_TIMEOUT = timedelta(seconds=10)
# Each run is delayed by a random 0..jitter x interval, so replicas and restarts spread out.
DEFAULT_JITTER = 0.1
# The backlog gauges look at most at this many rows: it sets a gauge's cost
# (docs/performance.md, "Gauges: why --backlog-limit is 500").
DEFAULT_BACKLOG_LIMIT = 500
# `reaper status` counts each backlog up to this many rows (--max-count). Counting 1M index
# entries takes ~0.1-0.3 s on these machines (bench/); past it the backlog is shown as
# ">= 1,000,000".
DEFAULT_BACKLOG_CAP = 1_000_000
# How often the backlog and storage gauges are refreshed (not on every scrape: the backlog
# count costs tens of milliseconds per sweep).
DEFAULT_GAUGE_INTERVAL = timedelta(minutes=1)
# Batches pause while a standby replays more than this far behind the primary (pacing).
DEFAULT_MAX_REPLICA_LAG = timedelta(seconds=10)
# While other sessions use the database, batches take at most this share of a run's wall
# time, down to half of it while their statements suffer (bench B4, docs/pacing.md: at 0.5
# the paced sweep took over twice the unpaced one's time by construction).
DEFAULT_BUSY_SHARE = 0.75
# While other sessions use the database, a batch aims at least at this long (the load
# controller grows the aim while their statements do not suffer: docs/pacing.md).
DEFAULT_BUSY_BATCH_SECONDS = 0.002
# After a failed run the sweep retries after failure_backoff, doubling per consecutive
# failure up to max_failure_backoff (then the success resets it).
DEFAULT_FAILURE_BACKOFF = timedelta(seconds=30)
DEFAULT_MAX_FAILURE_BACKOFF = timedelta(hours=1)
# Wall times without a time zone (timestamp, date columns) are read as UTC unless the
# application writes them in another zone (timestamp_time_zone names it).
DEFAULT_TIMESTAMP_TIME_ZONE = "UTC"
# The full-table interlock: a run stops before its first delete when at least this fraction
# of a table is eligible. A predicate that matches everything (a typo, a retention in the
# wrong unit) reads as 100%; a real backlog of garbage that large means the table went
# unswept for 20 times its retention, which deserves a look and an explicit opt-in.
DEFAULT_MAX_ELIGIBLE_FRACTION = 0.95
# ... but only on tables with at least this many rows (projected from the sample): a table of
# a few hundred rows that is all garbage is common (a test bed, a quiet cluster) and cheap.
FULL_TABLE_MIN_ROWS = 1_000
# A run stops before its first delete when the database clock, by which its cutoffs are
# computed, is further than this from reaper's host clock (or jumped further ahead since
# the process last read it). NTP keeps hosts within milliseconds; minutes leave room for a
# host whose sync lapsed a while, while a jump of hours or days is refused.
DEFAULT_MAX_CLOCK_SKEW = timedelta(minutes=5)


# reaper.config.schedule (APScheduler comes with it) is imported when a value is parsed: the
# command line imports these settings on every start.


def optional_cron(value: Any) -> str | None:
    """A cron expression (:func:`reaper.config.schedule.parse_cron`); "" or unset: none."""
    from reaper.config.schedule import parse_cron

    return None if value in (None, "") else parse_cron(value)


def optional_window(value: Any) -> tuple[time, time] | None:
    """A window (:func:`reaper.config.schedule.parse_window`); "", "any" or unset: none."""
    from reaper.config.schedule import parse_window

    return None if value in (None, "", ANY_TIME) else parse_window(value)


def sweep_window(value: Any) -> tuple[time, time] | str | None:
    """A ``[sweeps.NAME]`` window: its own, or "any" (any time, whatever the global one)."""
    return ANY_TIME if value == ANY_TIME else optional_window(value)


def parallel_connections(value: Any) -> int:
    """How many connections a heap walk may use: 1 to MAX_PARALLEL."""
    n = positive_int(value)
    if n > MAX_PARALLEL:
        raise ValueError(f"must be at most {MAX_PARALLEL}, got {n}")
    return n


class PerSweep(Declared):
    """The settings a ``[sweeps.NAME]`` table may set for its sweep; each is an attribute of
    every resolved sweep."""

    __slots__ = ()

    batch_size = Setting(
        DEFAULT_BATCH_SIZE, positive_int, "Rows deleted per batch transaction.", "ROWS"
    )
    max_rows_per_run = Setting(
        None, optional_positive_int, "Stop a sweep run after this many rows (0: no limit).", "ROWS"
    )
    max_seconds_per_run = Setting(
        None,
        optional_positive_duration,
        "Stop a sweep run after this long; the batch in flight finishes (0: no limit).",
        "DURATION",
    )
    strategy = Setting(
        Strategy.AUTO,
        strategy_name,
        "How a sweep finds its batches: heap (walk the table in block ranges), index (the "
        "predicate's index), or auto (heap when a sample of the table finds much garbage).",
        "auto|heap|index",
    )
    partition_action = Setting(
        PartitionAction.DROP,
        partition_action_name,
        "What a sweep does with a partition whose bounds prove every row past the cutoff: "
        "drop (DETACH CONCURRENTLY, then DROP TABLE), detach (keep it as a table of its own) "
        "or off (delete its rows in batches). Needs ownership of the table.",
        "drop|detach|off",
    )
    max_eligible_fraction = Setting(
        DEFAULT_MAX_ELIGIBLE_FRACTION,
        fraction,
        "A run stops before its first delete when at least this fraction of a table of "
        f"{FULL_TABLE_MIN_ROWS:,} rows or more is eligible (measured on a sample of its "
        "blocks); 1 allows a run to empty a table.",
        "FRACTION",
    )


class Settings(Values, PerSweep):
    """Everything reaper is told, validated once and frozen.

    Each setting is a :class:`Setting` attribute: the CLI turns it into a flag
    ``--setting-name`` with the variable ``REAPER_SETTING_NAME``, and the TOML file uses the
    key ``setting_name`` (or ``setting-name``). ``sweeps`` holds the ``[sweeps.NAME]``
    tables; ``origins`` where each given value came from (:meth:`where`).
    """

    __slots__ = ("sweeps",)
    sweeps: Mapping[str, SweepSettings]

    dsn = Setting(
        None,
        dsn_text,
        "libpq connection string or URI. Unset: libpq's PG* variables and service file.",
        "DSN",
        secret=True,
    )
    schema = Setting(
        "public",
        schema_name,
        "The schema of the control plane's tables (nodes, enrollment_requests, "
        "bootstrap_tokens, routers) that the built-in sweeps read and delete from. reaper "
        "names every table with its schema: the role's search_path never picks one.",
        "SCHEMA",
    )
    session_retention = Setting(
        DEFAULT_SESSION_RETENTION,
        positive_duration,
        "Keep a member's row this long after its session lapsed (nodes_session).",
        "DURATION",
    )
    node_retention = Setting(
        DEFAULT_NODE_RETENTION,
        positive_duration,
        "Keep a silent bootstrap member, a resolved or pending request, an expired token and "
        "an expired router lease this long.",
        "DURATION",
    )
    ephemeral_node_retention = Setting(
        DEFAULT_EPHEMERAL_NODE_RETENTION,
        positive_duration,
        "Keep a silent ephemeral member, and the requests of an ephemeral token, this long.",
        "DURATION",
    )
    statement_timeout = Setting(
        DEFAULT_STATEMENT_TIMEOUT,
        server_duration,
        "PostgreSQL statement_timeout for reaper's statements.",
        "DURATION",
    )
    lock_timeout = Setting(
        DEFAULT_LOCK_TIMEOUT,
        server_duration,
        "PostgreSQL lock_timeout: how long a batch may wait for a table lock.",
        "DURATION",
    )
    idle_in_transaction_session_timeout = Setting(
        DEFAULT_IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
        server_duration,
        "PostgreSQL idle_in_transaction_session_timeout for reaper's sessions.",
        "DURATION",
    )
    connect_timeout = Setting(
        DEFAULT_CONNECT_TIMEOUT,
        client_seconds,
        "How long to wait for a database connection.",
        "DURATION",
    )
    heap_walk_threshold = Setting(
        DEFAULT_HEAP_WALK_THRESHOLD,
        fraction,
        "With --strategy auto: walk the heap when at least this fraction of the table is garbage.",
        "FRACTION",
    )
    batch_target_seconds = Setting(
        timedelta(seconds=DEFAULT_BATCH_TARGET_SECONDS),
        positive_duration,
        "A heap-walk batch sizes its block range to take about this long.",
        "DURATION",
    )
    parallel = Setting(
        DEFAULT_PARALLEL,
        parallel_connections,
        "A heap walk deletes disjoint block ranges on up to this many connections at once, "
        f"1 to {MAX_PARALLEL}, while the database is idle (no live traffic, no standby "
        "behind, no wait); one connection otherwise. Batches stay as short as on one "
        "connection: a range with more garbage than one batch goes on over several, on the "
        "same connection.",
        "CONNECTIONS",
    )
    optimistic_batches = Setting(
        True,
        boolean,
        "Ignored, accepted so that existing configurations still load: batches never lock "
        "their rows first (see docs/engine.md).",
    )
    session_pooler = Setting(
        False,
        boolean,
        "The DSN points at a connection pooler in session mode (PgBouncer pool_mode=session: "
        "one server session per client connection). Off: a pooler is refused, since in "
        "transaction mode reaper's advisory locks cannot hold.",
    )
    synchronous_commit = Setting(
        False,
        boolean,
        "Wait for each batch's WAL flush. Off by default: a crash can at worst undo the last "
        "batches' deletes, which the next sweep repeats (bench --tune: on made B1 ~15% slower).",
    )
    max_replica_lag: Setting[timedelta | None] = Setting(
        DEFAULT_MAX_REPLICA_LAG,
        optional_positive_duration,
        "Start no batch that would end with a standby (pg_stat_replication) replaying "
        "further behind than this; batches resume when it catches up (0: never pause for "
        "standbys).",
        "DURATION",
    )
    busy_share = Setting(
        DEFAULT_BUSY_SHARE,
        share,
        "While other sessions use the database, batches take at most this fraction of a "
        "run's wall time, waiting between them, and down to half of it while those sessions' "
        "statements run slower beside the batches (1: no pause for live traffic).",
        "SHARE",
    )
    busy_batch_seconds = Setting(
        timedelta(seconds=DEFAULT_BUSY_BATCH_SECONDS),
        positive_duration,
        "While other sessions use the database, the least a batch aims at: batches start "
        "this short and grow toward --batch-target-seconds while those sessions' statements "
        "run no slower beside them, and shrink back when they do (their row limit follows the "
        "rows per second of the batches before). Ignored with --busy-share 1.",
        "DURATION",
    )
    max_wal_rate = Setting(
        None,
        optional_byte_rate,
        "The WAL brake: while a sweep runs, the server's WAL (every session's, as "
        "pg_current_wal_lsn() moves) may grow by at most this many bytes a second; batches "
        "wait while it grew faster. Whole bytes, or a number with a unit: kB, MB, GB (powers "
        "of 1000), KiB, MiB, GiB (powers of 1024), optionally followed by /s (e.g. 16MB, "
        "1.5MiB, 16MB/s); 0 in any unit: no brake, the default. To keep pg_wal within a "
        "volume: at most its free space / ((1 + checkpoint_completion_target) x "
        "checkpoint_timeout).",
        "BYTES",
        shown_default="0 (off)",
    )
    timestamp_time_zone = Setting(
        DEFAULT_TIMESTAMP_TIME_ZONE,
        time_zone,
        "The time zone in which the application writes the timestamp (without time zone) and "
        "date columns that predicates compare with a cutoff: reaper reads their wall times "
        "in it (it is every reaper session's TimeZone). An IANA name, e.g. UTC, Asia/Seoul.",
        "ZONE",
    )
    max_clock_skew: Setting[timedelta | None] = Setting(
        DEFAULT_MAX_CLOCK_SKEW,
        optional_positive_duration,
        "A run stops before its first delete when the database clock (cutoffs are its now() "
        "minus the retention) is further than this from reaper's host clock, or jumped "
        "further ahead since this process last read it (0: no clock check).",
        "DURATION",
    )
    seq_scan_max_rows = Setting(
        DEFAULT_SEQ_SCAN_MAX_ROWS,
        non_negative_int,
        "reaper check: a sweep's batch plan that scans a table of more rows than this "
        "sequentially is a failure.",
        "ROWS",
    )
    check_interval: Setting[timedelta | None] = Setting(
        DEFAULT_CHECK_INTERVAL,
        optional_positive_duration,
        "reaper run: repeat the startup checks this often (0: only at startup).",
        "DURATION",
    )
    strict = Setting(
        False,
        boolean,
        "Refuse to sweep when a check fails: reaper run does not start, run-once exits 1.",
    )
    interval = Setting(
        None,
        optional_interval,
        "reaper run: how often each sweep runs, unless its [sweeps.NAME] table sets interval "
        "(unset or 0: each sweep's own default, 5m for ephemeral members, 1h for the others).",
        "DURATION",
        sweep_key=True,
    )
    schedule = Setting(
        None,
        optional_cron,
        "reaper run: run each sweep at the times of this cron expression (minute hour "
        'day-of-month month day-of-week, as crontab reads it, e.g. "0 3 * * *" or '
        '"*/15 * * * 1-5"), read on --schedule-time-zone\'s clock, instead of every '
        "--interval; a [sweeps.NAME] table's interval or schedule wins.",
        "CRON",
        sweep_key=True,
    )
    window = Setting(
        None,
        optional_window,
        "reaper run: start runs only inside this daily window, HH:MM-HH:MM on "
        "--schedule-time-zone's clock (e.g. 01:00-05:00, or 22:00-04:00 over midnight); a run "
        "still going when it closes stops before its next batch and resumes when it opens. "
        "Unset or any: any time (a [sweeps.NAME] window of any lifts a global one).",
        "WINDOW",
        sweep_key=True,
        sweep_parse=sweep_window,
    )
    schedule_time_zone = Setting(
        "UTC",
        time_zone,
        "reaper run: the time zone whose clock --schedule and --window read, with its "
        "daylight saving time. An IANA name, e.g. UTC, Europe/Berlin.",
        "ZONE",
        sweep_key=True,
    )
    jitter = Setting(
        DEFAULT_JITTER,
        fraction,
        "reaper run: delay each run by a random 0..FRACTION of its interval.",
        "FRACTION",
    )
    listen = Setting(
        DEFAULT_LISTEN,
        listen_address,
        "reaper run: address of /metrics, /healthz and /readyz (:PORT is every interface; port 0 "
        "picks a free one, logged as http_listening).",
        "HOST:PORT",
    )
    web_config_file = Setting(
        None,
        optional_str,
        "reaper run: a web config file (the Prometheus exporters' format) whose "
        "basic_auth_users (name: bcrypt hash) guard the HTTP port.",
        "FILE",
    )
    shutdown_timeout = Setting(
        DEFAULT_SHUTDOWN_TIMEOUT,
        positive_duration,
        "reaper run: on SIGTERM/SIGINT, exit within this long; a batch still running then is "
        "cancelled (rolled back).",
        "DURATION",
    )
    backlog_limit = Setting(
        DEFAULT_BACKLOG_LIMIT,
        positive_int,
        "reaper run: reaper_backlog_rows counts at most this many rows.",
        "ROWS",
    )
    gauge_interval = Setting(
        DEFAULT_GAUGE_INTERVAL,
        positive_duration,
        "reaper run: how often the backlog and storage gauges are refreshed.",
        "DURATION",
    )
    failure_backoff = Setting(
        DEFAULT_FAILURE_BACKOFF,
        positive_duration,
        "reaper run: retry a failed sweep after this long, doubling per consecutive failure.",
        "DURATION",
    )
    max_failure_backoff = Setting(
        DEFAULT_MAX_FAILURE_BACKOFF,
        positive_duration,
        "reaper run: the longest wait between retries of a failing sweep.",
        "DURATION",
    )

    def __init__(
        self,
        *,
        sweeps: Mapping[str, SweepSettings] | None = None,
        origins: Mapping[str, str] | None = None,
        **values: Any,
    ) -> None:
        super().__init__(origins=origins, **values)
        object.__setattr__(self, "sweeps", dict(sweeps or {}))

    def _compared(self) -> tuple[Any, ...]:
        return (*super()._compared(), dict(self.sweeps))

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` (setting name -> value), its sweeps and origins kept."""
        values = {s.name: self.setting_value(s) for s in self.declarations()}
        return Settings(sweeps=self.sweeps, origins=self.origins, **{**values, **changes})

    def validate(self) -> Settings:
        """Check the rules that span several settings; return self. The sweeps are built,
        and checked, from these settings by :func:`reaper.config.load.load_config`.

        Raises:
            ConfigError: one line naming the settings, where each was given, and the fix.
        """
        named = self.described
        if self.ephemeral_node_retention > self.node_retention:
            raise ConfigError(
                f"{named('ephemeral_node_retention')} is longer than {named('node_retention')}: "
                "an ephemeral member must not outlive a regular one; shorten it or lengthen "
                "node_retention"
            )
        if self.schedule is not None and self.interval is not None:
            raise ConfigError(
                f"{named('interval')} and {named('schedule')} are both set; give one: the "
                "schedule runs sweeps at its times, the interval every so long"
            )
        if self.failure_backoff > self.max_failure_backoff:
            raise ConfigError(
                f"{named('failure_backoff')} is longer than {named('max_failure_backoff')}; "
                "shorten it or lengthen max_failure_backoff"
            )
        return self

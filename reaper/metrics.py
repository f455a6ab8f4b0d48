"""Prometheus metrics, created against a registry passed in.

Production uses prometheus-client's default registry; tests pass a fresh
``CollectorRegistry()`` and read values back with ``get_sample_value``. Every label set is
created at 0 up front, so ``increase()`` and absent-series alerts work from the first scrape.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from reaper.config.sweeps import Sweep
from reaper.sqltext.names import TableName
from reaper.vocab import (
    SERVER_CHECKS,
    SWEEP_CHECKS,
    ClockCheck,
    HorizonHolder,
    Outcome,
    SkipReason,
    ThrottleReason,
)

# The client (about 20 ms to import) is imported by Metrics itself: the engine imports this
# module, and `run-once` without --metrics-file makes no Metrics.
if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

# The checks of `reaper check` (the `check` label of reaper_check_failures): those about the
# server and the connection (reaper.vocab.SERVER_CHECKS) are labelled sweep="*"; the others
# (SWEEP_CHECKS) run once per sweep.
ALL_SWEEPS = "*"
# Why a row was skipped (reaper_skipped_rows_total's reason label).
SKIP_REASONS = tuple(SkipReason)
# Sweep runs last from milliseconds (nothing to delete) to many minutes (a first backlog).
SWEEP_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
# Batches aim at DEFAULT_BATCH_TARGET_SECONDS (50 ms); statement_timeout caps them (10 s).
BATCH_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def _build_labels() -> dict[str, str]:
    """reaper's, Python's and psycopg's versions (psycopg's from its installed metadata: only
    reaper/db imports psycopg)."""
    import platform
    from importlib import metadata

    from reaper import __version__

    try:
        psycopg = metadata.version("psycopg")
    except metadata.PackageNotFoundError:
        psycopg = ""
    return {"version": __version__, "python": platform.python_version(), "psycopg": psycopg}


class Metrics:
    """reaper's metrics for a set of sweeps.

    Args:
        sweeps: the sweeps whose label sets are created at 0.
        registry: where the metrics live.
        daemon: also the metrics only ``reaper run`` keeps current (whether the database
            answers, the last reload of the configuration); a ``run-once`` metrics file
            leaves them out, where they would go stale.
    """

    def __init__(
        self, sweeps: Iterable[Sweep], registry: CollectorRegistry, *, daemon: bool = False
    ) -> None:
        from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

        # The client adds a `_created` series (the process's start, as a timestamp) to every
        # counter and histogram label set: hundreds of series that no rule or panel reads.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry
        self.build_info = Gauge(
            "reaper_build_info",
            "Always 1; its labels name reaper's version, Python's, psycopg's, and the "
            "PostgreSQL server's (server_version, empty until reaper run has reached it).",
            ["version", "python", "psycopg", "postgresql"],
            registry=registry,
        )
        self._build = _build_labels()
        self.build_info.labels(**self._build, postgresql="").set(1)
        self.database_up: Gauge | None = None
        self.config_reload_ok: Gauge | None = None
        self.config_reload_time: Gauge | None = None
        if daemon:
            self.database_up = Gauge(
                "reaper_database_up",
                "reaper run only: 1 when the database answered the last readiness probe, 0 "
                "when it did not (refused, unreachable, or silent past the probe's bound) or "
                "has not yet.",
                registry=registry,
            )
            self.config_reload_ok = Gauge(
                "reaper_config_last_reload_successful",
                "reaper run only: 1 when the last load of the configuration (at start, or a "
                "reload on SIGHUP) succeeded, 0 when a reload was rejected (the running "
                "settings stay).",
                registry=registry,
            )
            self.config_reload_time = Gauge(
                "reaper_config_last_reload_success_timestamp_seconds",
                "reaper run only: Unix time of the last successful load of the configuration "
                "(at start, or a reload on SIGHUP).",
                registry=registry,
            )
            self.config_loaded(True)
        self.deleted_rows = Counter(
            "reaper_deleted_rows",
            "Rows deleted, by table and reason.",
            ["table", "reason"],
            registry=registry,
        )
        self.dropped_partitions = Counter(
            "reaper_dropped_partitions",
            "Partitions wholly past the cutoff removed from a swept table (dropped, or "
            "detached only with partition_action = detach), by table.",
            ["table"],
            registry=registry,
        )
        self.skipped_rows = Counter(
            "reaper_skipped_rows",
            "Rows a sweep left although they were eligible, by table and reason: a writer held "
            "the row (locked: tried again next run), its delete alone ran past "
            "statement_timeout (timeout), a foreign key refused it (foreign_key), or another "
            "error (error).",
            ["table", "reason"],
            registry=registry,
        )
        self.sweep_runs = Counter(
            "reaper_sweep_runs",
            "Sweep runs, by outcome (success, failure, skipped, refused).",
            ["sweep", "outcome"],
            registry=registry,
        )
        self.sweep_duration = Histogram(
            "reaper_sweep_duration_seconds",
            "Wall time of a sweep run.",
            ["sweep"],
            buckets=SWEEP_BUCKETS,
            registry=registry,
        )
        self.batch_duration = Histogram(
            "reaper_batch_duration_seconds",
            "Wall time of one batch transaction.",
            ["sweep"],
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self.last_success = Gauge(
            "reaper_sweep_last_success_timestamp_seconds",
            "Unix time of the last successful run of a sweep (0: none yet).",
            ["sweep"],
            registry=registry,
        )
        self.storage_rows = Gauge(
            "reaper_storage_rows",
            "Rows in a swept table, from the catalog's estimate (pg_class.reltuples).",
            ["table"],
            registry=registry,
        )
        self.check_failures = Gauge(
            "reaper_check_failures",
            "Failing findings of the last run of the checks (reaper check), by sweep and check; "
            'sweep="*" for the server and connection checks.',
            ["sweep", "check"],
            registry=registry,
        )
        for check in SERVER_CHECKS:
            self.check_failures.labels(sweep=ALL_SWEEPS, check=check)
        self.throttled_seconds = Counter(
            "reaper_throttled_seconds",
            "Seconds a sweep waited between batches, by reason: replica_lag (a standby too far "
            "behind, --max-replica-lag) or load (other sessions busy, --busy-share).",
            ["sweep", "reason"],
            registry=registry,
        )
        # The backlog gauges appear once measured (reaper run refreshes them every
        # --gauge-interval): a 0 before the first measurement would read as "nothing to do".
        self.backlog_rows = Gauge(
            "reaper_backlog_rows",
            "Rows a sweep would delete now: an index-served count, capped at --backlog-limit.",
            ["sweep"],
            registry=registry,
        )
        self.backlog_oldest = Gauge(
            "reaper_backlog_oldest_seconds",
            "How far past its cutoff the oldest row a sweep would delete is (0: none).",
            ["sweep"],
            registry=registry,
        )
        # Whether deleted rows' space is reclaimed (reaper.commands.space), refreshed with the
        # backlog gauges and, like them, absent until first measured.
        self.dead_rows = Gauge(
            "reaper_dead_rows",
            "Dead rows in a swept table (pg_stat_user_tables.n_dead_tup, summed over its "
            "partitions): deleted, their space not yet reusable until a vacuum removes them.",
            ["table"],
            registry=registry,
        )
        self.autovacuum_threshold = Gauge(
            "reaper_autovacuum_threshold_rows",
            "Dead rows past which autovacuum vacuums a swept table (autovacuum_vacuum_threshold "
            "+ autovacuum_vacuum_scale_factor x its estimated rows; the table's own settings "
            "where it has them).",
            ["table"],
            registry=registry,
        )
        self.last_vacuum = Gauge(
            "reaper_last_vacuum_timestamp_seconds",
            "Unix time of the latest VACUUM or autovacuum of a swept table (0: never; a "
            "partitioned table: its least recently vacuumed partition's).",
            ["table"],
            registry=registry,
        )
        self.horizon_age_transactions = Gauge(
            "reaper_xmin_horizon_age_transactions",
            "How many transactions old the xmin of the oldest holder of each kind of the "
            "database's xmin horizon is (0: none of that kind): transaction, "
            "prepared_transaction, replication_slot, standby. A vacuum removes no row deleted "
            "after it.",
            ["holder"],
            registry=registry,
        )
        self.horizon_age_seconds = Gauge(
            "reaper_xmin_horizon_age_seconds",
            "How long the oldest transaction (or prepared transaction) holding the xmin horizon "
            "has been open, where reaper's role may see its start (0: none of that kind).",
            ["holder"],
            registry=registry,
        )
        # The clock check (reaper.engine.clock): the skew appears with the first reading.
        self.clock_skew = Gauge(
            "reaper_clock_skew_seconds",
            "How far the database clock (cutoffs are its now() minus the retention) was ahead "
            "of reaper's host clock at the last run's reading (negative: behind).",
            registry=registry,
        )
        self.clock_refusals = Counter(
            "reaper_clock_refusals",
            "Runs refused before their first delete because the database clock disagreed with "
            "a second clock by more than --max-clock-skew, by sweep and by that clock: host "
            "(reaper's host clock) or history (the database clock's last reading by this "
            "process).",
            ["sweep", "clock"],
            registry=registry,
        )
        self.add_sweeps(sweeps)

    def add_sweeps(self, sweeps: Iterable[Sweep]) -> None:
        """Create every label set of ``sweeps`` at 0 (idempotent)."""
        for s in sweeps:
            self.deleted_rows.labels(table=s.table, reason=s.reason)
            self.dropped_partitions.labels(table=s.table)
            for why in SKIP_REASONS:
                self.skipped_rows.labels(table=s.table, reason=why)
            for outcome in Outcome:
                self.sweep_runs.labels(sweep=s.name, outcome=outcome)
            self.sweep_duration.labels(sweep=s.name)
            self.batch_duration.labels(sweep=s.name)
            self.last_success.labels(sweep=s.name)
            self.storage_rows.labels(table=s.table)
            for check in SWEEP_CHECKS:
                self.check_failures.labels(sweep=s.name, check=check)
            for reason in ThrottleReason:
                self.throttled_seconds.labels(sweep=s.name, reason=reason)
            for clock in ClockCheck:
                self.clock_refusals.labels(sweep=s.name, clock=clock)

    def database_answered(self, answered: bool, server_version: int | None = None) -> None:
        """Set ``reaper_database_up`` from a readiness probe (``answered``), and the
        ``postgresql`` label of ``reaper_build_info`` from the server's ``server_version_num``
        (e.g. 180001) when known."""
        if self.database_up is not None:
            self.database_up.set(1 if answered else 0)
        if server_version:
            shown = f"{server_version // 10000}.{server_version % 10000}"
            current = {s.labels["postgresql"] for m in self.build_info.collect() for s in m.samples}
            if current != {shown}:
                self.build_info.clear()
                self.build_info.labels(**self._build, postgresql=shown).set(1)

    def config_loaded(self, ok: bool) -> None:
        """Record a load of the configuration: ``reaper_config_last_reload_successful``, and
        when ``ok`` its time (``..._success_timestamp_seconds``)."""
        if self.config_reload_ok is not None:
            self.config_reload_ok.set(1 if ok else 0)
        if ok and self.config_reload_time is not None:
            self.config_reload_time.set_to_current_time()

    def batch_finished(self, sweep: str, seconds: float) -> None:
        """Count one committed batch that took ``seconds`` (its rows: :meth:`rows_deleted`,
        once durable)."""
        self.batch_duration.labels(sweep=sweep).observe(seconds)

    def rows_deleted(self, table: str, reason: str, rows: int) -> None:
        """Count ``rows`` deleted from ``table`` for ``reason`` whose deletes are durable
        (docs/metrics.md: the engine counts them once a crash or a failover cannot undo them)."""
        self.deleted_rows.labels(table=table, reason=reason).inc(rows)

    def throttled(self, sweep: str, reason: ThrottleReason, seconds: float) -> None:
        """Count ``seconds`` that a run of ``sweep`` waited for ``reason`` (pacing)."""
        self.throttled_seconds.labels(sweep=sweep, reason=reason).inc(max(seconds, 0.0))

    def partition_removed(self, table: str, reason: str, rows: int) -> None:
        """Count one partition removed from ``table`` (dropped or detached) and its ``rows``
        (counted before the detach, or the catalog's estimate) as deleted for ``reason``."""
        self.deleted_rows.labels(table=table, reason=reason).inc(rows)
        self.dropped_partitions.labels(table=table).inc()

    def row_skipped(self, table: str, reason: SkipReason) -> None:
        """Count one eligible row of ``table`` that a run skipped, by ``reason``."""
        self.skipped_rows.labels(table=table, reason=reason).inc()

    def sweep_finished(self, sweep: str, outcome: Outcome, seconds: float) -> None:
        """Count one sweep run with its outcome and duration (seconds)."""
        self.sweep_runs.labels(sweep=sweep, outcome=outcome).inc()
        if outcome != Outcome.SKIPPED:
            self.sweep_duration.labels(sweep=sweep).observe(seconds)
        if outcome == Outcome.SUCCESS:
            self.last_success.labels(sweep=sweep).set_to_current_time()

    def clock_read(self, skew_seconds: float) -> None:
        """Set ``reaper_clock_skew_seconds``: the database clock minus the host's (seconds)."""
        self.clock_skew.set(skew_seconds)

    def clock_refused(self, sweep: str, check: ClockCheck) -> None:
        """Count one run of ``sweep`` refused by the clock check ``check``."""
        self.clock_refusals.labels(sweep=sweep, clock=check).inc()

    def set_storage_rows(self, rows: Mapping[TableName, int]) -> None:
        """Set ``reaper_storage_rows`` from the catalog's estimates, by table."""
        for table, n in rows.items():
            self.storage_rows.labels(table=table).set(n)

    def set_check_failures(self, failures: Iterable[tuple[str, str]]) -> None:
        """Set ``reaper_check_failures`` from one run of the checks: ``failures`` holds a
        ``(sweep, check)`` pair per failing finding; every other known label set goes to 0."""
        counts: dict[tuple[str, str], int] = {}
        for key in failures:
            counts[key] = counts.get(key, 0) + 1
        known = {
            (sample.labels["sweep"], sample.labels["check"])
            for metric in self.check_failures.collect()
            for sample in metric.samples
        }
        for sweep, check in known | set(counts):
            self.check_failures.labels(sweep=sweep, check=check).set(counts.get((sweep, check), 0))

    def set_backlog(self, sweep: str, rows: int, oldest_seconds: float | None) -> None:
        """Set ``reaper_backlog_rows`` (rows) and, when known, the oldest row's seconds past
        its cutoff (``reaper_backlog_oldest_seconds``)."""
        self.backlog_rows.labels(sweep=sweep).set(rows)
        if oldest_seconds is not None:
            self.backlog_oldest.labels(sweep=sweep).set(oldest_seconds)

    def set_table_space(
        self, table: str, dead_rows: int, threshold: int, last_vacuum: float | None
    ) -> None:
        """Set a swept table's ``reaper_dead_rows``, ``reaper_autovacuum_threshold_rows`` (rows)
        and ``reaper_last_vacuum_timestamp_seconds`` (Unix time; None: never, shown as 0)."""
        self.dead_rows.labels(table=table).set(dead_rows)
        self.autovacuum_threshold.labels(table=table).set(threshold)
        self.last_vacuum.labels(table=table).set(last_vacuum or 0)

    def set_horizon(self, held: Mapping[HorizonHolder, tuple[int, float | None]]) -> None:
        """Set ``reaper_xmin_horizon_age_transactions`` and ``..._seconds`` from the oldest
        holder of each kind: ``held`` maps a kind to ``(xmin age in transactions, seconds open
        or None where unknown)``. A kind absent from ``held`` goes to 0; a seconds figure that
        is unknown leaves that series out (a 0 would read as "released")."""
        for kind in HorizonHolder:
            xmin_age, seconds = held.get(kind, (0, 0.0))
            self.horizon_age_transactions.labels(holder=kind).set(xmin_age)
            if kind not in (HorizonHolder.TRANSACTION, HorizonHolder.PREPARED_TRANSACTION):
                continue
            if seconds is None:
                with contextlib.suppress(KeyError):
                    self.horizon_age_seconds.remove(kind)
            else:
                self.horizon_age_seconds.labels(holder=kind).set(seconds)

    def write_textfile(self, path: Path) -> None:
        """Write every metric in the Prometheus text format to ``path``, atomically (a temporary
        file in the same directory, renamed), for node_exporter's textfile collector."""
        from prometheus_client import write_to_textfile

        write_to_textfile(str(path), self.registry)

"""``reaper run``: every enabled sweep on its own schedule, metrics and health over HTTP.

One APScheduler 3.x ``BackgroundScheduler`` holds one job per sweep (its own interval,
``max_instances=1``, ``coalesce``, a finite misfire grace, a random delay of up to
``--jitter`` x interval), plus housekeeping jobs on their own executors so that sweeps can
never starve them: the readiness probe (every :data:`READINESS_PROBE_SECONDS`), the gauge
refresh (``reaper_backlog_*`` and ``reaper_storage_rows``, every ``--gauge-interval``) and a
heartbeat that touches no database (every :data:`HEARTBEAT_SECONDS`, what /healthz reads).

/healthz is the process: the scheduler runs and its heartbeat is recent; it never depends on
the database. /readyz is the work: the database answered the last probe within its bound,
every swept table exists, and the server accepts writes (not a standby, not read-only).

After each run the next one is chosen from what the run did:

- it stopped at its budget (``--max-rows-per-run`` / ``--max-seconds-per-run``) with work
  left: the next run starts at once, back to back while there is a backlog;
- it failed: retry after ``--failure-backoff``, doubled per consecutive failure, capped at
  ``--max-failure-backoff`` (the other sweeps keep their schedules);
- otherwise: the normal interval.

Across processes, each run holds its sweep's advisory lock (see :func:`reaper.runner.lock_keys`);
inside one process a sweep waits for the run of a sweep it depends on rather than being
skipped by its own process's lock.

The seam for reloading (SIGHUP) and startup checks: :meth:`Daemon.apply` swaps the settings
and the sweeps and reschedules the jobs; :meth:`Daemon.start` / :meth:`Daemon.stop` are the
lifecycle; the ``reaper run`` command only wires signals to them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import structlog
from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from prometheus_client import CollectorRegistry

from reaper import checks, errors
from reaper.db import Database, Session, SweepStatements
from reaper.http import HttpServer, make_app
from reaper.metrics import Metrics
from reaper.runner import FAILURE, SUCCESS, SweepResult, compute_cutoffs, run_sweep
from reaper.settings import Settings, changed_settings, format_duration
from reaper.sweeps import Sweep

log = structlog.get_logger("reaper.daemon")

# At most this many sweeps run at once in one process; more wait in the executor's queue. The
# pool has two connections more, for the readiness probe and the gauge refresh.
MAX_PARALLEL_SWEEPS = 4
# The readiness probe asks the database every 5 s; /readyz fails when the last answer is
# older than 3 probes plus a connect timeout (one slow probe is not an outage).
READINESS_PROBE_SECONDS = 5.0
READY_STALE_PROBES = 3
# The readiness probe's statements each wait at most this long (reaper's watchdog), so one
# probe ends within connect_timeout (the pool's checkout) + this, whatever the network does.
PROBE_BOUND_SECONDS = 5.0
# /healthz fails when the scheduler's heartbeat (a job that touches no database, every 5 s, on
# an executor of its own) is older than this: the scheduler thread is gone or wedged. A
# restart is what helps then.
HEARTBEAT_SECONDS = 5.0
HEALTHY_HEARTBEAT_AGE_SECONDS = 30.0
# A run stopped at its budget is followed by the next one this soon: back to back.
BACKLOG_RERUN_SECONDS = 0.0
# The settings that shape the connection pool: a reload that changes one opens a new pool.
DATABASE_FIELDS = (
    "dsn",
    "statement_timeout",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
    "synchronous_commit",
    "connect_timeout",
    "session_pooler",
)
BUDGET_STOPS = ("max_rows", "max_seconds")
_SWEEPS_EXECUTOR, _PROBES_EXECUTOR, _HEARTBEAT_EXECUTOR = "sweeps", "probes", "heartbeat"
# Checks that could not run (the database did not answer) are tried again this soon (seconds).
CHECK_RETRY_SECONDS = 30.0
_PROBE_JOB, _GAUGE_JOB, _CHECK_JOB = "_readiness_probe", "_gauge_refresh", "_checks"
_HEARTBEAT_JOB = "_heartbeat"
# Failures that say the database could not do the work (rather than one sweep's problem): they
# make /readyz fail, and the sweeps they failed run again as soon as the probe sees it back.
_OUTAGE_ERRORS = (
    errors.ConnectionFailed.__name__,
    errors.ReadOnlyDatabase.__name__,
    errors.PrivilegeMissing.__name__,
)


def backoff_delay(failures: int, first: timedelta, cap: timedelta) -> timedelta:
    """The wait before retrying a sweep after ``failures`` consecutive failures (>= 1):
    ``first * 2 ** (failures - 1)``, at most ``cap``."""
    if failures <= 0:
        return timedelta(0)
    # 2**40 x any positive first is past any sane cap; avoids overflow for long outages.
    delay: timedelta = min(first * 2 ** min(failures - 1, 40), cap)
    return delay


@dataclass
class SweepState:
    """What the daemon remembers of a sweep between runs (a few fields: memory stays flat).

    Attributes:
        runs: runs finished (any outcome) since start.
        failures: consecutive failures (0 after a success).
        last: the last run's result.
        next_delay: seconds from the end of the last run to the next, when the daemon chose
            it (backlog: 0; failure: the backoff); None when the interval decides.
    """

    runs: int = 0
    failures: int = 0
    last: SweepResult | None = None
    next_delay: float | None = None


class _Health:
    """Readiness and liveness, written by the probe and the sweeps, read by HTTP threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ready = False
        self.reason = "no database answer yet"
        self.answered_at: float | None = None
        self.heartbeat_at = time.monotonic()
        self._reported: bool | None = None

    def set(self, ready: bool, reason: str) -> bool:
        """Record a probe's or a run's answer; log only the changes (an outage is one line
        when it starts and one when it ends, not one per probe). Returns True when this
        answer ends an outage (not ready before, ready now)."""
        with self.lock:
            self.ready, self.reason = ready, reason
            if ready:
                self.answered_at = time.monotonic()
            changed, self._reported = self._reported is not ready, ready
        if changed and ready:
            log.info("database_ready")
        elif changed:
            log.warning("database_not_ready", reason=reason)
        return changed and ready


class Daemon:
    """The long-running worker behind ``reaper run``.

    Args:
        settings: validated settings (intervals, budgets, listen address, timeouts).
        sweeps: the sweeps to schedule (enabled ones, any order).
        registry: where the metrics live (production: prometheus-client's default registry,
            which also carries the process_* metrics; tests: a fresh one).

    Raises:
        ConfigError: no sweep to run, or ``--listen`` cannot be bound.
    """

    def __init__(
        self,
        settings: Settings,
        sweeps: Sequence[Sweep],
        *,
        registry: CollectorRegistry,
    ) -> None:
        if not sweeps:
            raise errors.ConfigError(
                "no sweep is enabled: set enabled = true in a [sweeps.NAME] table"
            )
        self._settings = settings
        self._sweeps: dict[str, Sweep] = {s.name: s for s in sweeps}
        self._statements: dict[str, SweepStatements] = {}
        self._state: dict[str, SweepState] = {s.name: SweepState() for s in sweeps}
        self.metrics = Metrics(sweeps, registry)
        self.db = Database.from_settings(settings, max_connections=MAX_PARALLEL_SWEEPS + 2)
        self._stop = threading.Event()
        # Set by a stop request (signal) or a fatal error; the command waits on it.
        self.exit_requested = threading.Event()
        self.fatal: str | None = None
        # The exit code for ``fatal``: 2 (a connection reaper cannot work through), or 1 when
        # --strict refused to start on a failed check.
        self.fatal_exit_code = 2
        # The last run of the checks (None: not run yet, or the database was unreachable).
        self.findings: list[checks.Finding] | None = None
        self._lock_checked = False
        self._health = _Health()
        self._config_lock = threading.RLock()
        # In-process order: a sweep waits for a running sweep it depends on (or that depends on
        # it) instead of losing the advisory lock to its own process.
        self._order_locks: dict[str, threading.Lock] = {}
        self._inflight = 0
        self._inflight_cv = threading.Condition()
        self._scheduler = BackgroundScheduler(
            timezone="UTC",
            executors={
                _SWEEPS_EXECUTOR: ThreadPoolExecutor(MAX_PARALLEL_SWEEPS),
                _PROBES_EXECUTOR: ThreadPoolExecutor(3),
                _HEARTBEAT_EXECUTOR: ThreadPoolExecutor(1),
            },
            job_defaults={"max_instances": 1, "coalesce": True},
        )
        self._scheduler.add_listener(self._job_done, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        self.http = HttpServer(
            settings.listen, make_app(registry, self.healthz, self.readyz),
            Path(settings.web_config_file) if settings.web_config_file else None,
        )

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        """The settings in force."""
        return self._settings

    @property
    def sweeps(self) -> Mapping[str, Sweep]:
        """The scheduled sweeps, by name."""
        return dict(self._sweeps)

    def state(self, sweep: str) -> SweepState:
        """What the daemon remembers of ``sweep`` (a copy)."""
        return dataclasses.replace(self._state[sweep])

    def next_run_time(self, sweep: str) -> datetime | None:
        """When ``sweep`` runs next (UTC), None when it is not scheduled."""
        job = self._scheduler.get_job(sweep)
        when: datetime | None = None if job is None else job.next_run_time
        return when

    def start(self) -> None:
        """Serve HTTP, open the pool (connections come in the background: a database that is
        down is not an error, /readyz says so) and start the schedule."""
        if not logging.getLogger().isEnabledFor(logging.DEBUG):
            # "Running job ..." twice per run at INFO: reaper logs its own line per run.
            logging.getLogger("apscheduler").setLevel(logging.WARNING)
        self.http.start()
        self.db.open()
        if self._settings.strict and not self._strict_checks():
            return
        now = datetime.now(UTC)
        self._scheduler.add_job(
            self._heartbeat, IntervalTrigger(seconds=HEARTBEAT_SECONDS), id=_HEARTBEAT_JOB,
            executor=_HEARTBEAT_EXECUTOR, next_run_time=now, misfire_grace_time=1,
        )
        self._scheduler.add_job(
            self._probe, IntervalTrigger(seconds=READINESS_PROBE_SECONDS), id=_PROBE_JOB,
            executor=_PROBES_EXECUTOR, next_run_time=now, misfire_grace_time=1,
        )
        self._scheduler.add_job(
            self._refresh_gauges,
            IntervalTrigger(seconds=self._settings.gauge_interval.total_seconds()),
            id=_GAUGE_JOB, executor=_PROBES_EXECUTOR, next_run_time=now,
            misfire_grace_time=max(1, int(self._settings.gauge_interval.total_seconds())),
        )
        with self._config_lock:
            for sweep in self._sweeps.values():
                self._add_sweep_job(sweep, first=True)
            # --strict ran them already; otherwise at once, beside the first runs.
            self._schedule_checks(run_now=not self._settings.strict)
        self._scheduler.start()
        log.info(
            "daemon_started",
            listen=self._settings.listen,
            port=self.http.port,
            database=self.db.target,
            sweeps={n: format_duration(self._interval(s)) for n, s in self._sweeps.items()},
        )

    def request_stop(self) -> None:
        """Ask :meth:`stop`'s caller to stop (signal handlers call this; it only sets a flag)."""
        self.exit_requested.set()

    def stop(self, timeout: timedelta | None = None) -> bool:
        """Stop taking new work, let the batches in flight commit or roll back, close the pool
        and the HTTP port, all within ``timeout`` (default ``--shutdown-timeout``).

        A batch still running one second before the deadline has its statement cancelled
        (its transaction rolls back: never half a batch).

        Returns:
            True when every run ended in time; False when one was still running at the
            deadline (the caller should exit without waiting for it).
        """
        budget = (timeout or self._settings.shutdown_timeout).total_seconds()
        deadline = time.monotonic() + budget
        started = time.monotonic()
        self._stop.set()
        self.exit_requested.set()
        with contextlib.suppress(SchedulerNotRunningError):
            self._scheduler.shutdown(wait=False)
        # Leave the last second (or a quarter of a short budget) for cancelling and closing.
        margin = min(1.0, budget / 4)
        clean = self._wait_idle(deadline - margin)
        if not clean:
            cancelled = self.db.cancel_running()
            log.warning("shutdown_cancelling", connections=cancelled)
            clean = self._wait_idle(deadline - margin / 2)
        self.db.close(timeout=max(0.1, deadline - time.monotonic()))
        self.http.stop()
        log.info("daemon_stopped", seconds=round(time.monotonic() - started, 3), clean=clean)
        return clean

    def _wait_idle(self, until: float) -> bool:
        with self._inflight_cv:
            while self._inflight:
                left = until - time.monotonic()
                if left <= 0:
                    return False
                self._inflight_cv.wait(left)
            return True

    @contextlib.contextmanager
    def _working(self) -> Iterator[None]:
        with self._inflight_cv:
            self._inflight += 1
        try:
            yield
        finally:
            with self._inflight_cv:
                self._inflight -= 1
                self._inflight_cv.notify_all()

    # -- reload seam ---------------------------------------------------------------------

    def apply(self, settings: Settings, sweeps: Sequence[Sweep]) -> None:
        """Swap in new settings and sweeps (a SIGHUP reload): jobs of removed sweeps go, new
        sweeps get jobs, changed intervals are rescheduled, a changed connection setting
        opens a new pool (runs in flight finish on the old one, which then closes).
        ``--listen`` is not re-bound (log says so): it needs a restart.

        Raises:
            ConfigError: ``sweeps`` is empty.
        """
        if not sweeps:
            raise errors.ConfigError(
                "no sweep is enabled: set enabled = true in a [sweeps.NAME] table"
            )
        with self._config_lock:
            old = self._settings
            if any(getattr(old, f) != getattr(settings, f) for f in DATABASE_FIELDS):
                new_db = Database.from_settings(settings, max_connections=MAX_PARALLEL_SWEEPS + 2)
                new_db.open()
                old_db, self.db = self.db, new_db
                self._lock_checked = False
                old_db.close(timeout=0.1)
            if settings.listen != old.listen:
                log.warning("listen_unchanged", listen=old.listen, wanted=settings.listen,
                            hint="restart reaper to listen elsewhere")
            self._settings = settings
            new = {s.name: s for s in sweeps}
            for name in set(self._sweeps) - set(new):
                with contextlib.suppress(JobLookupError):
                    self._scheduler.remove_job(name)
                self._state.pop(name, None)
            self.metrics.add_sweeps(sweeps)
            for name, sweep in new.items():
                self._state.setdefault(name, SweepState())
                self._statements.pop(name, None)
                if self._scheduler.get_job(name) is None:
                    self._sweeps[name] = sweep
                    self._add_sweep_job(sweep, first=True)
                else:
                    self._scheduler.reschedule_job(name, trigger=self._trigger(sweep))
            self._sweeps = new
            gauge = settings.gauge_interval.total_seconds()
            with contextlib.suppress(JobLookupError):
                self._scheduler.reschedule_job(_GAUGE_JOB, trigger=IntervalTrigger(seconds=gauge))
            if self._scheduler.running:
                # The sweeps or their settings changed: check them again now.
                self._schedule_checks(run_now=True)
        log.info("daemon_reconfigured",
                 sweeps={n: format_duration(self._interval(s)) for n, s in new.items()})

    def reload(self, load: Callable[[], tuple[Settings, Sequence[Sweep]]]) -> bool:
        """SIGHUP: ``load`` re-reads and validates the configuration (the TOML file under the
        same flags); the new settings and sweeps are applied (:meth:`apply`: retentions,
        intervals, enabled sweeps and budgets change without a restart). An invalid file is
        rejected with one ``reload_rejected`` log line and the running settings stay.

        Returns:
            True when the new configuration is in force.
        """
        old = self._settings
        try:
            settings, sweeps = load()
            self.apply(settings, sweeps)
        except errors.ConfigError as exc:
            log.error("reload_rejected", error=str(exc))
            return False
        log.info("settings_reloaded", changed=changed_settings(old, settings))
        return True

    # -- checks (reaper check, at startup and every --check-interval) --------------------

    def run_checks(self) -> list[checks.Finding] | None:
        """Run the checks of ``reaper check`` for the scheduled sweeps: each finding that is
        not a pass is logged, ``reaper_check_failures`` set. None when the database could not
        be reached (logged; the gauge keeps its values)."""
        with self._config_lock:
            sweeps, settings = list(self._sweeps.values()), self._settings
        try:
            findings = checks.run_checks(self.db, sweeps, settings)
        except errors.ReaperError as exc:
            log.warning("checks_not_run", error=str(exc))
            return None
        if self.exit_requested.is_set() and not settings.strict:
            return None  # shutting down (or a fatal error): its line is the last one
        checks.report(findings, self.metrics)
        self.findings = findings
        return findings

    def _run_checks_job(self) -> None:
        if self._stop.is_set() or self.exit_requested.is_set():
            return
        if not self._lock_checked:
            # The readiness probe has not yet made its advisory lock probe on this pool: wait
            # for it. Two probes at once share one key, and one that finds the key taken takes
            # it for "another reaper probing" and passes, so the probe could miss a pooler.
            self._retry_checks(READINESS_PROBE_SECONDS)
            return
        if self.run_checks() is None and not self.exit_requested.is_set():
            # The database did not answer: try again soon rather than a --check-interval on.
            self._retry_checks(CHECK_RETRY_SECONDS)

    def _retry_checks(self, seconds: float) -> None:
        with contextlib.suppress(JobLookupError, SchedulerNotRunningError):
            self._scheduler.add_job(
                self._run_checks_job, id=f"{_CHECK_JOB}_retry", executor=_PROBES_EXECUTOR,
                next_run_time=datetime.now(UTC) + timedelta(seconds=seconds),
                replace_existing=True, misfire_grace_time=60,
            )

    def _strict_checks(self) -> bool:
        """--strict: the checks run before any sweep is scheduled; a failure (or a database
        that cannot be checked) makes the daemon refuse to start (``fatal``, exit code 1)."""
        findings = self.run_checks()
        if findings is None:
            problem = "the checks could not run (is the database reachable?)"
        else:
            failed = checks.failures(findings)
            if not failed:
                return True
            first = failed[0]
            problem = (
                f"{len(failed)} check(s) failed, first: {first.sweep} {first.check} "
                f"{first.subject}: {first.detail}"
            )
        self.fatal = f"--strict: {problem}; not starting (see `reaper check`)"
        self.fatal_exit_code = 1
        log.critical("strict_checks_failed", error=self.fatal)
        self._health.set(False, self.fatal)
        self.exit_requested.set()
        return False

    def _schedule_checks(self, *, run_now: bool) -> None:
        """(Re)schedule the checks every ``--check-interval`` (none: only the run now)."""
        with contextlib.suppress(JobLookupError):
            self._scheduler.remove_job(_CHECK_JOB)
        interval = self._settings.check_interval
        first = datetime.now(UTC) if run_now else None
        if interval is not None:
            self._scheduler.add_job(
                self._run_checks_job, IntervalTrigger(seconds=interval.total_seconds()),
                id=_CHECK_JOB, executor=_PROBES_EXECUTOR,
                misfire_grace_time=max(1, int(interval.total_seconds())),
                **({"next_run_time": first} if first else {}),
            )
        elif first is not None:
            self._scheduler.add_job(
                self._run_checks_job, id=_CHECK_JOB, executor=_PROBES_EXECUTOR,
                next_run_time=first, misfire_grace_time=60,
            )

    # -- scheduling ----------------------------------------------------------------------

    def _interval(self, sweep: Sweep) -> timedelta:
        return self._settings.interval_for(sweep.name, sweep.interval)

    def jitter_seconds(self, sweep: Sweep) -> float:
        """The largest random delay added to a run of ``sweep``: ``--jitter`` x interval."""
        return self._interval(sweep).total_seconds() * self._settings.jitter

    def _trigger(self, sweep: Sweep) -> IntervalTrigger:
        return IntervalTrigger(
            seconds=self._interval(sweep).total_seconds(), jitter=self.jitter_seconds(sweep) or None
        )

    def _add_sweep_job(self, sweep: Sweep, *, first: bool) -> None:
        # The first run comes within one jitter of the start: a restart does not wait a whole
        # interval, and replicas started together spread out.
        delay = random.uniform(0, self.jitter_seconds(sweep)) if first else 0.0
        interval = self._interval(sweep).total_seconds()
        self._scheduler.add_job(
            self._run_sweep,
            self._trigger(sweep),
            args=[sweep.name],
            id=sweep.name,
            name=f"sweep {sweep.name}",
            executor=_SWEEPS_EXECUTOR,
            next_run_time=datetime.now(UTC) + timedelta(seconds=delay),
            # A run more than one interval late is dropped (coalesce folds the rest into one).
            misfire_grace_time=max(1, int(interval)),
            replace_existing=True,
        )

    def _order_lock(self, name: str) -> threading.Lock:
        with self._config_lock:
            return self._order_locks.setdefault(name, threading.Lock())

    @contextlib.contextmanager
    def _in_order(self, sweep: Sweep) -> Iterator[bool]:
        """Hold the in-process locks of ``sweep`` and the scheduled sweeps it runs after
        (sorted, so two runs never wait on each other); yields False when a stop came first."""
        names = sorted({sweep.name, *(a for a in sweep.after if a in self._sweeps)})
        held: list[threading.Lock] = []
        try:
            for name in names:
                lock = self._order_lock(name)
                while not lock.acquire(timeout=0.2):
                    if self._stop.is_set():
                        yield False
                        return
                held.append(lock)
            yield True
        finally:
            for lock in reversed(held):
                lock.release()

    def run_sweep_now(self, name: str) -> SweepResult | None:
        """Run sweep ``name`` once, as its job does (tests, benchmarks); None when stopping."""
        return self._run_sweep(name)

    def _run_sweep(self, name: str) -> SweepResult | None:
        with self._working():
            sweep = self._sweeps.get(name)
            if sweep is None or self._stop.is_set():
                return None
            with self._in_order(sweep) as go:
                if not go:
                    return None
                result = run_sweep(
                    self.db, sweep, self._settings, metrics=self.metrics, stop=self._stop
                )
            if result.error_type in _OUTAGE_ERRORS:
                self._health.set(False, result.error or "database unreachable")
            elif result.outcome == SUCCESS and self._health.set(True, ""):
                self._retry_after_outage()
            return result

    def _job_done(self, event: JobExecutionEvent) -> None:
        """After a sweep's run (scheduler thread or executor thread, after the job's instance
        count went down): pick the next run from what this one did."""
        name = event.job_id
        if name not in self._state or self._stop.is_set():
            return
        result: SweepResult | None = getattr(event, "retval", None)
        if event.exception is not None:
            log.error("sweep_job_crashed", sweep=name, error=repr(event.exception))
        elif result is None:
            return
        state = self._state[name]
        state.runs += 1
        state.last = result
        sweep = self._sweeps.get(name)
        if sweep is None:
            return
        delay: float | None = None
        if event.exception is not None or (result is not None and result.outcome == FAILURE):
            state.failures += 1
            backoff = backoff_delay(
                state.failures, self._settings.failure_backoff, self._settings.max_failure_backoff
            ).total_seconds()
            delay = backoff * (1 + random.uniform(0, self._settings.jitter))
            log.info("sweep_retry_scheduled", sweep=name, failures=state.failures,
                     retry_in_seconds=round(delay, 3))
        else:
            state.failures = 0
            if result and result.outcome == SUCCESS and result.stopped_by in BUDGET_STOPS:
                delay = BACKLOG_RERUN_SECONDS
                log.info("sweep_backlog_continues", sweep=name, stopped_by=result.stopped_by,
                         rows=result.rows)
        state.next_delay = delay
        if delay is not None:
            self._reschedule(name, delay)
        if result and result.outcome == SUCCESS and result.rows:
            # Rows this run deleted may have been all that kept rows of a later sweep alive
            # (requests hold their tokens): bring the later sweeps' runs forward.
            for later in self._sweeps.values():
                if name in later.after:
                    self._reschedule(later.name, 0.0)

    def _reschedule(self, name: str, delay: float) -> None:
        with contextlib.suppress(JobLookupError, SchedulerNotRunningError):
            self._scheduler.modify_job(
                name, next_run_time=datetime.now(UTC) + timedelta(seconds=delay)
            )

    # -- housekeeping --------------------------------------------------------------------

    def _tables(self) -> list[str]:
        return sorted({s.table for s in self._sweeps.values()})

    def _heartbeat(self) -> None:
        """What /healthz reads: the scheduler still starts jobs (no database involved)."""
        self._health.heartbeat_at = time.monotonic()

    def _probe(self) -> None:
        """Readiness: the database answers, every swept table exists, reaper's role holds the
        privileges the batches need and the server accepts writes. The first answer also
        checks that advisory locks can hold on this connection string (fatal when not). Each
        statement waits at most :data:`PROBE_BOUND_SECONDS`."""
        # Not counted as work in flight: a probe holds nothing, and one stuck connecting to
        # a dead host must not hold up a shutdown.
        if self._stop.is_set():
            return
        try:
            with self.db.session(bound=PROBE_BOUND_SECONDS) as session:
                missing = session.missing_tables(self._tables())
                refusal, stale = session.write_refusal()
                lacking = [] if missing else session.missing_privileges(self._privileges(session))
            if stale:
                # An ALTER DATABASE/ROLE ... SET default_transaction_read_only since the pool
                # connected: its sessions keep the old value, new ones get the new one.
                log.info("database_settings_changed", action="renewing pooled connections")
                self.db.renew_connections()
            if not self._lock_checked:
                self.db.check_advisory_locks()
                self._lock_checked = True
        except errors.LockNotHeld as exc:
            self.fatal = str(exc)
            log.critical("advisory_lock_does_not_hold", error=self.fatal)
            self._health.set(False, self.fatal)
            self.exit_requested.set()
            return
        except errors.ConnectionFailed as exc:
            # The pool only says it got no connection in time; a direct attempt tells why
            # (refused, authentication, no such database), password scrubbed.
            reason = str(exc)
            try:
                self.db.check_connection()
            except errors.ConnectionFailed as direct:
                reason = str(direct)
            self._health.set(False, reason)
            return
        except errors.DatabaseError as exc:
            self._health.set(False, str(exc))
            return
        if refusal is not None:
            self._health.set(False, refusal)
        elif missing:
            self._health.set(False, f"missing tables: {', '.join(missing)}")
        elif lacking:
            what = ", ".join(f"{p} on table {t}" for t, p in lacking)
            self._health.set(False, f"reaper's role lacks {what} (see reaper/sql/grants.sql)")
        elif self._health.set(True, ""):
            self._retry_after_outage()

    def _privileges(self, session: Session) -> list[tuple[str, str]]:
        """Every ``(table, privilege)`` the scheduled sweeps' batches need (no duplicates)."""
        needed: dict[tuple[str, str], None] = {}
        for sweep in list(self._sweeps.values()):
            with contextlib.suppress(errors.ConfigError):
                needed.update(
                    dict.fromkeys(self._statements_for(session, sweep).required_privileges())
                )
        return list(needed)

    def _retry_after_outage(self) -> None:
        """The database is back: the sweeps whose last run failed on the outage (unreachable,
        read-only) run again now, spread over one jitter, instead of after their backoff."""
        with self._config_lock:
            names = [
                name for name, state in self._state.items()
                if state.failures and state.last is not None
                and state.last.error_type in _OUTAGE_ERRORS and name in self._sweeps
            ]
        for name in names:
            delay = random.uniform(0, self.jitter_seconds(self._sweeps[name]))
            log.info("sweep_retry_scheduled", sweep=name, reason="database_back",
                     retry_in_seconds=round(delay, 3))
            self._reschedule(name, delay)

    def _statements_for(self, session: Session, sweep: Sweep) -> SweepStatements:
        stmts = self._statements.get(sweep.name)
        if stmts is None:
            # Checked against this server's catalog once, before the first gauge query.
            stmts = SweepStatements(session.check_predicate(sweep))
            self._statements[sweep.name] = stmts
        return stmts

    def refresh_gauges(self) -> None:
        """Set reaper_storage_rows (catalog estimate) and, per sweep, reaper_backlog_rows (an
        index-served count up to --backlog-limit) and reaper_backlog_oldest_seconds. A sweep
        whose query fails keeps its last values; the failure is logged."""
        self._refresh_gauges()

    def _refresh_gauges(self) -> None:
        # Not counted as work in flight (see _probe).
        if self._stop.is_set():
            return
        settings = self._settings
        try:
            with self.db.session() as session:
                self.metrics.set_storage_rows(session.storage_rows(self._tables()))
                for sweep in list(self._sweeps.values()):
                    if self._stop.is_set():
                        return
                    try:
                        cutoffs: dict[str, Any] = dict(
                            compute_cutoffs(session, sweep, settings, None)
                        )
                        stmts = self._statements_for(session, sweep)
                        rows = session.backlog_rows(stmts, cutoffs, settings.backlog_limit)
                        oldest = (
                            session.backlog_oldest_seconds(stmts, cutoffs, settings.backlog_limit)
                            if rows else (0.0 if sweep.since else None)
                        )
                        self.metrics.set_backlog(sweep.name, rows, oldest)
                    except errors.ConnectionFailed:
                        raise
                    except errors.ReaperError as exc:
                        log.warning("backlog_failed", sweep=sweep.name, error=str(exc))
        except errors.ReaperError as exc:
            log.warning("gauges_failed", error=str(exc))

    # -- HTTP checks ---------------------------------------------------------------------

    def healthz(self) -> tuple[bool, str]:
        """Alive: no fatal error, the scheduler runs and its heartbeat (a job that touches no
        database) ran within :data:`HEALTHY_HEARTBEAT_AGE_SECONDS`. Never asks the
        database: a database outage is /readyz's business, and a restart would not help."""
        if self.fatal:
            return False, self.fatal
        if not self._scheduler.running:
            return False, "the scheduler is not running"
        age = time.monotonic() - self._health.heartbeat_at
        if age > HEALTHY_HEARTBEAT_AGE_SECONDS:
            return False, f"the scheduler has not run a job for {age:.0f}s"
        return True, ""

    def readyz(self) -> tuple[bool, str]:
        """Ready: the database answered lately, every swept table exists, reaper's role holds
        the privileges the batches need, and the server accepts writes (else False with the
        reason: unreachable, a standby, default_transaction_read_only on, missing tables, a
        missing privilege)."""
        with self._health.lock:
            ready, reason, answered = (
                self._health.ready, self._health.reason, self._health.answered_at
            )
        if not ready:
            return False, reason
        stale = READY_STALE_PROBES * READINESS_PROBE_SECONDS + (
            self._settings.connect_timeout.total_seconds()
        )
        if answered is None or time.monotonic() - answered > stale:
            return False, f"no database answer for {stale:.0f}s"
        return True, ""

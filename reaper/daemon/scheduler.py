"""``reaper run``: every enabled sweep on its own schedule, metrics and health over HTTP.

One APScheduler 3.x ``BackgroundScheduler`` holds one job per sweep (its own interval,
``max_instances=1``, ``coalesce``, a finite misfire grace, a random delay of up to
``--jitter`` x interval), plus housekeeping jobs on their own executors so that sweeps can
never starve them: the readiness probe (every
:data:`reaper.daemon.health.READINESS_PROBE_SECONDS`), the gauge refresh (``reaper_backlog_*`` and
``reaper_storage_rows``, every ``--gauge-interval``) and a heartbeat that touches no database
(every :data:`reaper.daemon.health.HEARTBEAT_SECONDS`, what /healthz reads).

When a sweep runs next (backoff, back-to-back runs over a backlog, dependants brought forward)
is decided by :mod:`reaper.daemon.policy`; what /healthz and /readyz answer by
:mod:`reaper.daemon.health`;
the backlog and table-size gauges are :mod:`reaper.daemon.gauges`; the signals and the main loop of
the process are :mod:`reaper.daemon.process`. This module carries the decisions out: the jobs, the
pool, the in-process order of the sweeps, reloads and the periodic checks.

Across processes, each run holds its sweep's advisory lock (see
:func:`reaper.engine.run.lock_keys`);
inside one process a sweep waits for the run of a sweep it depends on rather than being
skipped by its own process's lock.

The seam for reloading (SIGHUP) and startup checks: :meth:`Daemon.apply` swaps the settings
and the sweeps and reschedules the jobs; :meth:`Daemon.start` / :meth:`Daemon.stop` are the
lifecycle; :func:`reaper.daemon.process.serve` wires signals to them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog
from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_EXECUTED,
    EVENT_JOB_SUBMITTED,
    JobExecutionEvent,
    JobSubmissionEvent,
)
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from prometheus_client import CollectorRegistry

from reaper import errors
from reaper.commands import checks
from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import Settings, changed_settings
from reaper.config.sweeps import Budget, Sweep
from reaper.config.triggers import SweepTrigger, every
from reaper.config.values import format_duration
from reaper.daemon import policy
from reaper.daemon.answers import make_app
from reaper.daemon.gauges import GaugeRefresher
from reaper.daemon.health import (
    HEARTBEAT_SECONDS,
    OUTAGE_KINDS,
    READINESS_PROBE_SECONDS,
    Health,
    NotReady,
    probe,
)
from reaper.daemon.http import HttpServer
from reaper.daemon.policy import SweepState
from reaper.daemon.webconfig import WebConfig
from reaper.db import Database, Session, SweepStatements
from reaper.engine.result import SweepResult
from reaper.engine.run import RunRequest, Sweeper
from reaper.metrics import Metrics
from reaper.sqltext.names import TableName
from reaper.vocab import Outcome

log = structlog.get_logger("reaper.daemon")

# At most this many sweeps run at once in one process; more wait in the executor's queue. The
# pool has two connections more, for the readiness probe and the gauge refresh.
MAX_PARALLEL_SWEEPS = 4
_SWEEPS_EXECUTOR, _PROBES_EXECUTOR, _HEARTBEAT_EXECUTOR = "sweeps", "probes", "heartbeat"
# Checks that could not run (the database did not answer) are tried again this soon (seconds).
CHECK_RETRY_SECONDS = 30.0
_PROBE_JOB, _GAUGE_JOB, _CHECK_JOB = "_readiness_probe", "_gauge_refresh", "_checks"
_HEARTBEAT_JOB = "_heartbeat"
# A cron sweep's run more than this late (the process was stopped, the machine asleep) is
# dropped rather than run at a time the operator did not choose; the next time comes as usual.
CRON_MISFIRE_GRACE_SECONDS = 3600


def _timing(sweep: Sweep) -> str:
    """When a sweep runs, for the log: ``1h``, ``0 3 * * * (UTC)``, plus its window."""
    when = str(sweep.schedule) if sweep.schedule is not None else format_duration(sweep.interval)
    return when + (f" in {sweep.window}" if sweep.window is not None else "")


class Daemon:
    """The long-running worker behind ``reaper run``.

    Args:
        settings: validated settings (intervals, budgets, listen address, timeouts).
        sweeps: the sweeps to schedule (enabled ones, any order).
        registry: where the metrics live (production: prometheus-client's default registry,
            which also carries the process_* metrics; tests: a fresh one).
        now: the wall clock (aware) by which windows open and close and a run's next time is
            chosen (tests pin it).

    Raises:
        ConfigError: no sweep to run, or ``--listen`` cannot be bound.
    """

    def __init__(
        self,
        settings: Settings,
        sweeps: Sequence[Sweep],
        *,
        registry: CollectorRegistry,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not sweeps:
            raise errors.ConfigError(
                "no sweep is enabled: set enabled = true in a [sweeps.NAME] table"
            )
        self._settings = settings
        self._now = now
        self._sweeps: dict[str, Sweep] = {s.name: s for s in sweeps}
        self._statements: dict[str, SweepStatements] = {}
        self._state: dict[str, SweepState] = {s.name: SweepState() for s in sweeps}
        self.metrics = Metrics(sweeps, registry, daemon=True)
        self.db = Database(connection_settings(settings), max_connections=MAX_PARALLEL_SWEEPS + 2)
        # The engine's process state (the interlock's ledger, the pacers' WAL history) for
        # the daemon's life, kept per Database: a reload's new one starts afresh.
        self.sweeper = Sweeper()
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
        self._health = Health()
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
        self._scheduler.add_listener(self._job_submitted, EVENT_JOB_SUBMITTED)
        # When each sweep's job was handed to the executor (time.monotonic()): a run that
        # waited for a worker thread behind others counts its wait for the database from
        # then, so it fails with them in an outage instead of a connect timeout later.
        self._submitted: dict[str, float] = {}
        self.gauges = GaugeRefresher(
            self.metrics,
            lambda: (self.db, list(self._sweeps.values()), self._settings),
            self._statements_for,
            self._stop,
        )
        self.http = HttpServer(
            settings.listen,
            make_app(registry, self.healthz, self.readyz),
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
        """What the daemon remembers of ``sweep`` (:mod:`reaper.daemon.policy` decides from it)."""
        return self._state[sweep]

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
            self._health.beat,
            every(HEARTBEAT_SECONDS),
            id=_HEARTBEAT_JOB,
            executor=_HEARTBEAT_EXECUTOR,
            next_run_time=now,
            misfire_grace_time=1,
        )
        self._scheduler.add_job(
            self._probe,
            every(READINESS_PROBE_SECONDS),
            id=_PROBE_JOB,
            executor=_PROBES_EXECUTOR,
            next_run_time=now,
            misfire_grace_time=1,
        )
        self._scheduler.add_job(
            self.gauges.refresh,
            every(self._settings.gauge_interval.total_seconds()),
            id=_GAUGE_JOB,
            executor=_PROBES_EXECUTOR,
            next_run_time=now,
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
            sweeps={n: _timing(s) for n, s in self._sweeps.items()},
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
        opens a new pool (runs in flight finish on the old one, which then closes), and the
        web config file is read again. ``--listen`` is not re-bound (log says so): it needs a
        restart.

        Raises:
            ConfigError: ``sweeps`` is empty, or the web config file is invalid.
        """
        if not sweeps:
            raise errors.ConfigError(
                "no sweep is enabled: set enabled = true in a [sweeps.NAME] table"
            )
        # Read before anything changes: a bad file leaves every running setting as it was.
        web = WebConfig.load(Path(settings.web_config_file)) if settings.web_config_file else None
        with self._config_lock:
            old = self._settings
            # Any connection setting changed (the DSN, a timeout, the time zone...): a new pool.
            if connection_settings(old) != connection_settings(settings):
                new_db = Database(
                    connection_settings(settings), max_connections=MAX_PARALLEL_SWEEPS + 2
                )
                new_db.open()
                old_db, self.db = self.db, new_db
                self._lock_checked = False
                old_db.close(timeout=0.1)
            if settings.listen != old.listen:
                log.warning(
                    "listen_unchanged",
                    listen=old.listen,
                    wanted=settings.listen,
                    hint="restart reaper to listen elsewhere",
                )
            self._settings = settings
            self.http.configure(web)
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
                self._scheduler.reschedule_job(_GAUGE_JOB, trigger=every(gauge))
            if self._scheduler.running:
                # The sweeps or their settings changed: check them again now.
                self._schedule_checks(run_now=True)
        log.info("daemon_reconfigured", sweeps={n: _timing(s) for n, s in new.items()})

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
            self.metrics.config_loaded(False)
            return False
        self.metrics.config_loaded(True)
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
                self._run_checks_job,
                id=f"{_CHECK_JOB}_retry",
                executor=_PROBES_EXECUTOR,
                next_run_time=datetime.now(UTC) + timedelta(seconds=seconds),
                replace_existing=True,
                misfire_grace_time=60,
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
        self._health.set(False, self.fatal, NotReady.FATAL)
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
                self._run_checks_job,
                every(interval.total_seconds()),
                id=_CHECK_JOB,
                executor=_PROBES_EXECUTOR,
                misfire_grace_time=max(1, int(interval.total_seconds())),
                **({"next_run_time": first} if first else {}),
            )
        elif first is not None:
            self._scheduler.add_job(
                self._run_checks_job,
                id=_CHECK_JOB,
                executor=_PROBES_EXECUTOR,
                next_run_time=first,
                misfire_grace_time=60,
            )

    # -- scheduling ----------------------------------------------------------------------

    def _interval(self, sweep: Sweep) -> timedelta:
        return sweep.interval

    def jitter_seconds(self, sweep: Sweep) -> float:
        """The largest random delay added to a run of ``sweep``: ``--jitter`` x interval (none
        for a cron schedule: its times are the operator's)."""
        if sweep.schedule is not None:
            return 0.0
        return policy.jitter_seconds(self._interval(sweep), self._settings.jitter)

    def _trigger(self, sweep: Sweep) -> SweepTrigger:
        if sweep.schedule is not None:
            inner = sweep.schedule.trigger()
        else:
            inner = IntervalTrigger(
                seconds=self._interval(sweep).total_seconds(),
                jitter=self.jitter_seconds(sweep) or None,
            )
        return SweepTrigger(inner, cron=sweep.schedule, window=sweep.window)

    def _in_window(self, sweep: Sweep, when: datetime) -> datetime:
        """``when``, or the next opening of the sweep's window when it is shut then."""
        return when if sweep.window is None else sweep.window.next_open(when)

    def _add_sweep_job(self, sweep: Sweep, *, first: bool) -> None:
        delay = policy.first_run_delay(self.jitter_seconds(sweep), random.uniform) if first else 0.0
        interval = self._interval(sweep).total_seconds()
        extra: dict[str, object] = {}
        if sweep.schedule is None:
            # An interval sweep runs first soon after the start; a cron one at its first time.
            start = self._now() + timedelta(seconds=delay)
            extra["next_run_time"] = self._in_window(sweep, start)
        self._scheduler.add_job(
            self.run_sweep,
            self._trigger(sweep),
            args=[sweep.name],
            id=sweep.name,
            name=f"sweep {sweep.name}",
            executor=_SWEEPS_EXECUTOR,
            # A run more than one interval (an hour, for a cron schedule) late is dropped
            # (coalesce folds the rest into one).
            misfire_grace_time=(
                max(1, int(interval)) if sweep.schedule is None else CRON_MISFIRE_GRACE_SECONDS
            ),
            replace_existing=True,
            **extra,
        )

    def _order_lock(self, name: str) -> threading.Lock:
        with self._config_lock:
            return self._order_locks.setdefault(name, threading.Lock())

    @contextlib.contextmanager
    def _in_order(self, sweep: Sweep) -> Iterator[bool]:
        """Hold the in-process locks of ``sweep`` and the scheduled sweeps it runs after
        (sorted, so two runs never wait on each other); yields False when a stop came first."""
        names = policy.order_locks(sweep.name, sweep.after, self._sweeps)
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

    def run_sweep(self, name: str) -> SweepResult | None:
        """Run sweep ``name`` once, as its job does: after the runs of the sweeps it depends on
        in this process, and reporting to the readiness state. None when stopping or when
        ``name`` is not scheduled."""
        with self._working():
            sweep = self._sweeps.get(name)
            if sweep is None or self._stop.is_set():
                return None
            with self._in_order(sweep) as go:
                if not go:
                    return None
                budget = self._run_budget(sweep)
                if budget is None:
                    return None
                result = self.sweeper.run(
                    self.db,
                    sweep,
                    engine_options(self._settings),
                    RunRequest(
                        budget=budget,
                        stop=self._stop,
                        waiting_since=self._submitted.pop(name, None),
                    ),
                    metrics=self.metrics,
                )
            if policy.stops_every_sweep(result.error_type):
                self._health.set(
                    False,
                    result.error or "database unreachable",
                    OUTAGE_KINDS.get(result.error_type or "", NotReady.UNREACHABLE),
                )
            elif result.outcome == Outcome.SUCCESS and self._health.set(True, ""):
                self._retry_after_outage()
            return result

    def _run_budget(self, sweep: Sweep) -> Budget | None:
        """The budget of a run of ``sweep`` starting now: its own, ending when its window
        closes; None when its window is shut (a late job, a reload that moved the window):
        no run starts, and the job is moved to the window's opening."""
        if sweep.window is None:
            return sweep.budget
        now = self._now()
        closes = sweep.window.closes_at(now)
        if closes is None:
            opens = sweep.window.next_open(now)
            log.info(
                "sweep_outside_window",
                sweep=sweep.name,
                window=str(sweep.window),
                opens_at=opens.isoformat(),
            )
            self._reschedule(sweep.name, (opens - now).total_seconds())
            return None
        return dataclasses.replace(sweep.budget, window_seconds=(closes - now).total_seconds())

    def _job_submitted(self, event: JobSubmissionEvent) -> None:
        if event.job_id in self._state:
            self._submitted[event.job_id] = time.monotonic()

    def _job_done(self, event: JobExecutionEvent) -> None:
        """After a sweep's run (scheduler thread or executor thread, after the job's instance
        count went down): ask the policy for the next run and schedule it."""
        name = event.job_id
        # A run that started before its submission was recorded leaves it: not the next's.
        self._submitted.pop(name, None)
        if name not in self._state or self._stop.is_set():
            return
        result: SweepResult | None = getattr(event, "retval", None)
        crashed = event.exception is not None
        if crashed:
            log.error("sweep_job_crashed", sweep=name, error=repr(event.exception))
        elif result is None:
            return
        if name not in self._sweeps:
            return
        settings = self._settings
        state, decision = policy.after_run(
            self._state[name],
            result,
            crashed=crashed,
            backoff=policy.Backoff(
                settings.failure_backoff, settings.max_failure_backoff, settings.jitter
            ),
            dependants=policy.dependants(name, {s.name: s.after for s in self._sweeps.values()}),
            uniform=random.uniform,
        )
        self._state[name] = state
        if decision.retry and decision.delay is not None:
            log.info(
                "sweep_retry_scheduled",
                sweep=name,
                failures=state.failures,
                retry_in_seconds=round(decision.delay, 3),
            )
        elif decision.backlog and result is not None:
            log.info(
                "sweep_backlog_continues",
                sweep=name,
                stopped_by=result.stopped_by,
                rows=result.rows,
            )
        if decision.delay is not None:
            self._reschedule(name, decision.delay)
        # Rows this run deleted may have been all that kept rows of a later sweep alive
        # (requests hold their tokens): bring the later sweeps' runs forward.
        for later in decision.pull_forward:
            self._reschedule(later, 0.0)

    def _reschedule(self, name: str, delay: float) -> None:
        """Run ``name`` ``delay`` seconds from now, or when its window next opens after that."""
        sweep = self._sweeps.get(name)
        when = self._now() + timedelta(seconds=delay)
        if sweep is not None:
            when = self._in_window(sweep, when)
        with contextlib.suppress(JobLookupError, SchedulerNotRunningError):
            self._scheduler.modify_job(name, next_run_time=when)

    # -- housekeeping --------------------------------------------------------------------

    def _tables(self) -> list[TableName]:
        return sorted({s.table for s in self._sweeps.values()})

    def _probe(self) -> None:
        """The readiness probe's job (:func:`reaper.daemon.health.probe`). The first answer on a
        pool also checks that advisory locks hold on this connection string: fatal when not."""
        # Not counted as work in flight: a probe holds nothing, and one stuck connecting to
        # a dead host must not hold up a shutdown.
        if self._stop.is_set():
            return
        try:
            answer = probe(
                self.db, self._tables(), self._privileges, check_locks=not self._lock_checked
            )
        except errors.LockNotHeld as exc:
            self.fatal = str(exc)
            log.critical("advisory_lock_does_not_hold", error=self.fatal)
            self._health.set(False, self.fatal, NotReady.FATAL)
            self.exit_requested.set()
            return
        if self._stop.is_set():
            # Answered while the daemon shut down (its pool closing): says nothing about the
            # database, and would log "not ready" after daemon_stopped.
            return
        self.metrics.database_answered(answer.answered, answer.server_version)
        if answer.locks_checked:
            self._lock_checked = True
        if answer.problem is not None:
            self._health.set(False, answer.problem, answer.kind)
        elif self._health.set(True, ""):
            self._retry_after_outage()

    def _privileges(self, session: Session) -> list[tuple[TableName, str]]:
        """Every ``(table, privilege)`` the scheduled sweeps' batches need (no duplicates)."""
        needed: dict[tuple[TableName, str], None] = {}
        for sweep in list(self._sweeps.values()):
            # A sweep whose table is gone has no statements: the probe reports the table.
            with contextlib.suppress(errors.ConfigError, errors.ObjectMissing):
                needed.update(
                    dict.fromkeys(self._statements_for(session, sweep).required_privileges())
                )
        return list(needed)

    def _retry_after_outage(self) -> None:
        """The database is back: the sweeps whose last run failed on the outage (unreachable,
        read-only) run again now, spread over one jitter, instead of after their backoff."""
        with self._config_lock:
            names = policy.outage_retries(self._state, self._sweeps)
        for name in names:
            delay = random.uniform(0, self.jitter_seconds(self._sweeps[name]))
            log.info(
                "sweep_retry_scheduled",
                sweep=name,
                reason="database_back",
                retry_in_seconds=round(delay, 3),
            )
            self._reschedule(name, delay)

    def _statements_for(self, session: Session, sweep: Sweep) -> SweepStatements:
        stmts = self._statements.get(sweep.name)
        if stmts is None:
            stmts = session.statements(sweep.predicate)
            self._statements[sweep.name] = stmts
        return stmts

    # -- HTTP checks ---------------------------------------------------------------------

    def healthz(self) -> tuple[bool, str]:
        """/healthz: alive (:meth:`reaper.daemon.health.Health.healthz`). Never asks the
        database."""
        return self._health.healthz(fatal=self.fatal, scheduler_running=self._scheduler.running)

    def readyz(self) -> tuple[bool, str, str]:
        """/readyz: ready (:meth:`reaper.daemon.health.Health.readyz`): the database answered
        lately, every swept table exists, reaper's role holds the privileges the batches need, and
        the server accepts writes; else False with the class of the reason and the reason."""
        return self._health.readyz(connect_timeout=self._settings.connect_timeout)

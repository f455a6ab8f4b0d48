"""The engine: run one sweep, in short batches, and report what it did.

Every sweep has the same skeleton (:meth:`Sweeper.run`): take the sweep's locks; read the
database clock, checked against the host's clock and its own last reading
(:mod:`reaper.engine.clock`), for the cutoffs; plan the run (its statements, budget and
collaborators, fixed before the first batch: :class:`reaper.engine.context.Run`); execute it
(:mod:`reaper.engine.execute`: the interlock, the partitions, the batches); settle the count
of its deleted rows; report rows, batches, seconds and the outcome. A failure is caught here,
logged, counted and returned as a result: the next sweep runs as if nothing happened.

One :class:`Sweeper` per process (run-once makes one, the daemon one) runs the sweeps and
keeps what outlives a run: per database, the rows deleted per table (the full-table
interlock's ledger), the WAL positions the pacer dates a standby's lag by, and the rows found
undeletable (:mod:`reaper.engine.undeletable`).
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from reaper import errors
from reaper.config.engine import EngineOptions
from reaper.config.sweeps import Budget, Sweep
from reaper.db import Database, Session, advisory_lock_key, utc_instant
from reaper.engine import clock, pacing
from reaper.engine.archive import LineArchive
from reaper.engine.context import Run, RunSpec, RunTools
from reaper.engine.execute import LOG_NAME, execute, keep
from reaper.engine.interlock import DeletionLedger
from reaper.engine.result import SweepResult
from reaper.engine.undeletable import UndeletableRows
from reaper.metrics import Metrics
from reaper.vocab import Outcome

log = structlog.get_logger(LOG_NAME)

SUCCESS, FAILURE, SKIPPED, REFUSED = (
    Outcome.SUCCESS,
    Outcome.FAILURE,
    Outcome.SKIPPED,
    Outcome.REFUSED,
)


@dataclass(frozen=True)
class RunRequest:
    """How one invocation asks for a run of a sweep (what run-once and a job vary).

    Attributes:
        now: pin the clock (tests); None uses the database's now().
        dry_run: count the eligible rows, delete nothing.
        budget: stop after so many rows or seconds (None: the sweep's own).
        stop: checked between batches; when set, the run ends after the batch in flight.
        on_batch: called after every batch with the result so far (progress bars).
        lock: first take the sweep's session-level advisory locks (:func:`lock_keys`) on
            the connection that runs the batches, released at the end; when another
            session holds one, the run is ``skipped``. A dry run takes no lock.
        waiting_since: when the run started waiting for its turn (``time.monotonic()``):
            its wait for the database counts from then (``since`` of
            :meth:`reaper.db.Database.session`).
    """

    now: datetime | None = None
    dry_run: bool = False
    budget: Budget | None = None
    stop: threading.Event | None = None
    on_batch: Callable[[SweepResult], None] | None = None
    lock: bool = True
    waiting_since: float | None = None


@dataclass(frozen=True)
class _Job:
    """One run asked of the :class:`Sweeper`, as its steps share it."""

    db: Database
    sweep: Sweep
    options: EngineOptions
    request: RunRequest
    metrics: Metrics | None
    # When the run began (time.monotonic()): its budget counts from there.
    started: float = field(default_factory=time.monotonic)

    @property
    def dry_run(self) -> bool:
        return self.request.dry_run


@dataclass
class _DatabaseMemory:
    """What a process keeps of one database between runs."""

    ledger: DeletionLedger = field(default_factory=DeletionLedger)
    # A dry run's own ledger: the rows it counted, as a run would delete them.
    projected: DeletionLedger = field(default_factory=DeletionLedger)
    pacing: pacing.Memory = field(default_factory=pacing.Memory)
    clock: clock.ClockHistory = field(default_factory=clock.ClockHistory)
    undeletable: UndeletableRows = field(default_factory=UndeletableRows)


class Sweeper:
    """The process's engine: runs sweeps (:meth:`run`) and keeps, per :class:`Database` (as
    long as it lives), what the runs on it share: the :class:`DeletionLedger` of the
    full-table interlock (a dry run's projected one apart), the pacer's
    :class:`reaper.engine.pacing.Memory` and the rows found undeletable. Made once per
    process: by ``run-once`` for its invocation, by the daemon for its life (a reload's new
    Database starts afresh).
    Thread-safe: the daemon's sweeps run in parallel.
    """

    def __init__(
        self,
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        # The host's clocks that the database clock is checked against (tests pin them).
        self._wall, self._monotonic = wall, monotonic
        self._memory: weakref.WeakKeyDictionary[Database, _DatabaseMemory] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def _of(self, db: Database) -> _DatabaseMemory:
        with self._lock:
            memory = self._memory.get(db)
            if memory is None:
                memory = self._memory[db] = _DatabaseMemory()
            return memory

    def ledger(self, db: Database, *, projected: bool = False) -> DeletionLedger:
        """The :class:`DeletionLedger` of ``db``; ``projected``: the dry runs' own, of the
        rows they counted as a run would delete them, apart from what real runs deleted."""
        memory = self._of(db)
        return memory.projected if projected else memory.ledger

    def pacing(self, db: Database) -> pacing.Memory:
        """The pacers' memory of ``db`` (its WAL positions, the warnings already logged)."""
        return self._of(db).pacing

    def run(
        self,
        db: Database,
        sweep: Sweep,
        options: EngineOptions,
        request: RunRequest = RunRequest(),
        *,
        metrics: Metrics | None = None,
    ) -> SweepResult:
        """Run one sweep to completion, budget or stop. Never raises for a sweep's failure.

        Args:
            db: the database to sweep.
            sweep: what to delete.
            options: the engine's options (:func:`reaper.config.engine.engine_options`).
            request: how this invocation asks for the run (dry run, budget, stop ...).
            metrics: counters to update per batch and per run (None: no metrics).

        Returns:
            The run's :class:`SweepResult`; ``outcome`` is ``skipped`` when another session
            holds its lock, ``failure`` with ``error`` set when anything raised (a lock that
            does not hold across transactions raises LockNotHeld). Batches committed before a
            failure stay deleted and are counted.
        """
        job = _Job(db, sweep, options, request, metrics)
        result = SweepResult(sweep.name, sweep.table, sweep.reason, dry_run=job.dry_run)
        bug: Exception | None = None
        run: Run | None = None
        try:
            with (
                db.session(read_only=job.dry_run, since=request.waiting_since) as session,
                _locked(session, job, result) as held,
            ):
                if held:
                    now, refusal = self._read_clock(job, session)
                    run = self._plan(job, session, result, now)
                    if refusal is None:
                        execute(session, run, self.ledger(db, projected=job.dry_run))
                    else:
                        result.refusal = refusal  # a dry run: a real run would stop here
        except Exception as exc:
            bug = _failed(result, exc)
        if run is not None:
            _settle(db, run)
        _report(job, result, bug)
        return result

    def _read_clock(self, job: _Job, session: Session) -> tuple[datetime, str | None]:
        """The database clock's reading that the run's cutoffs come from, checked against
        the host's clock and this process's earlier reading (:mod:`reaper.engine.clock`), the
        one chokepoint of the clock check: ``(now, None)``, or for a dry run whose clock a
        real run would refuse, ``(now, the refusal's line)``. A pinned ``now`` (tests) is
        not checked.

        Raises:
            ClockSkewRefused: a real run's clock is refused (counted in ``metrics``; a dry
                run counts nothing).
        """
        sweep, metrics, dry_run = job.sweep, job.metrics, job.dry_run
        if job.request.now is not None:
            return utc_instant(session.now(job.request.now)), None
        reading = clock.read_clock(session.now, self._wall, self._monotonic)
        history = self._of(job.db).clock
        verdict = clock.judge_clock(sweep.name, reading, history.last, job.options.max_clock_skew)
        if metrics is not None and not dry_run:
            metrics.clock_read(verdict.host_skew)
        if verdict.refused_by is None:
            history.record(reading)
            return reading.database, None
        log.warning(
            "clock_refused",
            sweep=sweep.name,
            clock=verdict.refused_by,
            host_skew_seconds=round(verdict.host_skew, 3),
            history_skew_seconds=None
            if verdict.history_skew is None
            else round(verdict.history_skew, 3),
        )
        if dry_run:
            return reading.database, verdict.message
        if metrics is not None:
            metrics.clock_refused(sweep.name, verdict.refused_by)
        raise errors.ClockSkewRefused(verdict.message)

    def _plan(self, job: _Job, session: Session, result: SweepResult, now: datetime) -> Run:
        """The run, fixed before its first batch: its cutoffs at ``now`` (logged), its
        statements, budget and collaborators (a dry run's: its session alone)."""
        sweep, request, dry_run = job.sweep, job.request, job.dry_run
        result.cutoffs = clock.cutoffs_at(sweep, now)
        log.debug(
            "sweep_started",
            sweep=sweep.name,
            table=sweep.table,
            reason=sweep.reason,
            cutoffs=_iso(result.cutoffs),
            dry_run=dry_run,
        )
        spec = RunSpec(
            sweep,
            session.statements(sweep.predicate, None if dry_run else keep(sweep)),
            dict(result.cutoffs),
            job.options,
            request.budget or sweep.budget,
            dry_run,
        )
        if dry_run:
            return Run.begin(
                spec,
                RunTools(session),
                result=result,
                on_batch=request.on_batch,
                stop=request.stop,
                started=job.started,
            )
        archive = sweep.archive_file
        tools = RunTools(
            session,
            before_commit=None
            if archive is None
            else LineArchive(archive, sweep.name, sweep.table),
            undeletable=self._of(job.db).undeletable,
            # A heap walk's extra connections (docs/engine.md, "Parallel heap ranges").
            helper_session=job.db.helper_session,
        )
        pacer = pacing.for_run(
            self.pacing(job.db), session, job.options, sweep.name, job.metrics, request.stop
        )
        return Run.begin(
            spec,
            tools,
            result=result,
            metrics=job.metrics,
            on_batch=request.on_batch,
            stop=request.stop,
            pacer=pacer,
            started=job.started,
        )

    def run_all(
        self,
        db: Database,
        sweeps: Iterable[Sweep],
        options: EngineOptions,
        request: RunRequest = RunRequest(),
        *,
        metrics: Metrics | None = None,
    ) -> list[SweepResult]:
        """Run ``sweeps`` one after the other (already in dependency order); one failing never
        stops the next."""
        return [self.run(db, s, options, request, metrics=metrics) for s in sweeps]


def run_sweep(
    db: Database,
    sweep: Sweep,
    options: EngineOptions,
    *,
    sweeper: Sweeper | None = None,
    metrics: Metrics | None = None,
    **request: Any,
) -> SweepResult:
    """One run of ``sweep`` by ``sweeper`` (:meth:`Sweeper.run`; the other keyword arguments
    make its :class:`RunRequest`). Without one, the run is judged alone: a new Sweeper, whose
    interlock ledger knows of no earlier deletion."""
    return (sweeper or Sweeper()).run(db, sweep, options, RunRequest(**request), metrics=metrics)


def run_sweeps(
    db: Database,
    sweeps: Iterable[Sweep],
    options: EngineOptions,
    *,
    sweeper: Sweeper | None = None,
    metrics: Metrics | None = None,
    **request: Any,
) -> list[SweepResult]:
    """Run ``sweeps`` one after the other (already in dependency order) by one ``sweeper``
    (a new one when None), so that the interlock judges them together; one failing never
    stops the next. The other keyword arguments make the :class:`RunRequest`."""
    return (sweeper or Sweeper()).run_all(
        db, sweeps, options, RunRequest(**request), metrics=metrics
    )


@contextlib.contextmanager
def _locked(session: Session, job: _Job, result: SweepResult) -> Iterator[bool]:
    """Hold the sweep's advisory locks (:func:`lock_keys`) for the run: True while held (or
    none are asked for); False, with the run ``skipped`` and its holders named, when another
    session holds one."""
    keys = lock_keys(job.sweep) if job.request.lock and not job.dry_run else []
    if keys and not session.try_advisory_locks(keys):
        result.outcome = SKIPPED
        result.holders = session.advisory_lock_holders(keys)
        result.lock_holders = [h.pid for h in result.holders]
        yield False
        return
    result.locked_at = time.time()
    try:
        yield True
    finally:
        result.unlocked_at = time.time()
        if keys:
            session.release_advisory_locks()


def _failed(result: SweepResult, exc: Exception) -> Exception | None:
    """Record ``exc`` as the run's failure (a refusal: :class:`errors.Refusal`); returns it
    when it is a bug (not one of reaper's own errors), whose traceback the log keeps."""
    own = isinstance(exc, errors.ReaperError)
    result.outcome = REFUSED if isinstance(exc, errors.Refusal) else FAILURE
    result.error = str(exc) if own else repr(exc)
    result.error_type = type(exc).__name__
    result.sqlstate = exc.sqlstate if isinstance(exc, errors.ReaperError) else None
    return None if own else exc


def _settle(db: Database, run: Run) -> None:
    """The rows of ``run`` not yet counted (its session failed before their durability was
    known, or the flush did not come in time): asked once more on a session of its own (a
    killed backend, a lost connection: the server that kept them answers), else dropped,
    never counted, with one ``deleted_rows_not_counted`` line."""
    durable = run.tally.durable
    if durable is None or not durable.uncounted:
        return
    try:
        with db.session() as session:
            if not durable.finish(session):
                return
    except errors.ReaperError:
        pass
    durable.give_up()


def _report(job: _Job, result: SweepResult, bug: Exception | None) -> None:
    """The run's seconds, its outcome counted in the metrics (not a dry run's) and its one
    canonical line logged."""
    result.seconds = time.monotonic() - job.started
    if job.metrics is not None and not job.dry_run:
        job.metrics.sweep_finished(result.sweep, result.outcome, result.seconds)
    bound = log.bind(sweep=result.sweep, table=result.table, reason=result.reason)
    _log_result(bound, result, bug)


def _log_result(bound: Any, result: SweepResult, bug: Exception | None) -> None:
    """The run's one canonical line: ``sweep_finished``, ``sweep_skipped``,
    ``sweep_refused`` or ``sweep_failed``."""
    fields = dict(
        rows=result.rows,
        batches=result.batches,
        seconds=round(result.seconds, 3),
        cutoffs=_iso(result.cutoffs),
        strategy=result.strategy,
        contended_batches=result.contended_batches,
        timed_out_batches=result.timed_out_batches,
        skipped=result.skipped,
        known_undeletable=result.known_undeletable,
        dry_run=result.dry_run,
    )
    if result.outcome == FAILURE:
        # A bug (not one of reaper's own errors) keeps its traceback; expected failures
        # stay one line, a database error with its SQLSTATE.
        traceback = {"exc_info": bug} if bug is not None else {}
        bound.error(
            "sweep_failed",
            error=result.error,
            error_type=result.error_type,
            sqlstate=result.sqlstate,
            **traceback,
            **fields,
        )
    elif result.outcome == REFUSED:
        # A safety check stopped the run before its first delete, as it was told to: one
        # line naming the check and the fix, never a traceback.
        bound.error("sweep_refused", error=result.error, error_type=result.error_type, **fields)
    elif result.outcome == SKIPPED:
        # Another process (a replica, a run-once by hand) runs this sweep or one it depends
        # on: not an error, the next scheduled run tries again. Or any login squats on the
        # (publicly computable) keys: the holder is named so that it can be found.
        bound.info(
            "sweep_skipped",
            lock_holders=[h.as_dict() for h in result.holders],
            seconds=fields["seconds"],
        )
    else:
        bound.info(
            "sweep_finished",
            stopped_by=result.stopped_by,
            locked_at=result.locked_at,
            unlocked_at=result.unlocked_at,
            **fields,
        )


def lock_keys(sweep: Sweep) -> list[int]:
    """The advisory lock keys a run of ``sweep`` holds: its own, and those of the sweeps it
    runs after (``after``), sorted. Holding its predecessors' locks means a sweep never runs
    while one that must come first runs in any process (tokens while requests are deleted),
    and the reverse.
    """
    return sorted({advisory_lock_key(n) for n in (sweep.name, *sweep.after)})


def _iso(cutoffs: Mapping[str, datetime]) -> dict[str, str]:
    return {k: v.isoformat() for k, v in cutoffs.items()}

"""The engine: run one sweep, in short batches, and report what it did.

Every sweep has the same skeleton: compute the cutoffs once by the database clock, checked
against the host's clock and its own last reading (:mod:`reaper.engine.clock`), and log
them; pick how to find the garbage (walk the heap in block ranges when it is a large part of
the table, follow the predicate's index when it is scattered); delete in bounded batches,
each its own transaction, until nothing is left, a budget is spent, or a stop is asked for;
report rows, batches, seconds and the outcome. A failure is caught here, logged, counted and
returned as a result: the next sweep runs as if nothing happened.

One :class:`Sweeper` per process (run-once makes one, the daemon one) runs the sweeps and
keeps what outlives a run: per database, the rows deleted per table (the full-table
interlock's ledger), the WAL positions the pacer dates a standby's lag by, and the rows found
undeletable (:mod:`reaper.engine.undeletable`).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from reaper import errors, sqltext
from reaper.config.engine import EngineOptions
from reaper.config.sweeps import Budget, Sweep
from reaper.db import (
    Database,
    Keep,
    Session,
    WhoAmI,
    advisory_lock_key,
    regclass_text,
    utc_instant,
)
from reaper.engine import clock, pacing, retire
from reaper.engine.archive import LineArchive
from reaper.engine.batches import Deleter, batch_strategy
from reaper.engine.context import DURABLE_WAIT_SECONDS, Run
from reaper.engine.interlock import (
    DeletionLedger,
    EligibleMeasure,
    TableWindow,
    judge_table,
    measure_eligible,
)
from reaper.engine.result import SweepResult
from reaper.engine.sizing import BatchSizer
from reaper.engine.strategy import choose_strategy
from reaper.engine.undeletable import UndeletableRows
from reaper.metrics import Metrics
from reaper.sqltext.names import TableName
from reaper.vocab import Outcome, StopReason

_LOG_NAME = "reaper.runner"
log = structlog.get_logger(_LOG_NAME)

SUCCESS, FAILURE, SKIPPED = Outcome.SUCCESS, Outcome.FAILURE, Outcome.SKIPPED


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
        *,
        metrics: Metrics | None = None,
        now: datetime | None = None,
        dry_run: bool = False,
        budget: Budget | None = None,
        stop: threading.Event | None = None,
        on_batch: Callable[[SweepResult], None] | None = None,
        lock: bool = True,
        waiting_since: float | None = None,
    ) -> SweepResult:
        """Run one sweep to completion, budget or stop. Never raises for a sweep's failure.

        Args:
            db: the database to sweep.
            sweep: what to delete.
            options: the engine's options (:func:`reaper.config.engine.engine_options`).
            metrics: counters to update per batch and per run (None: no metrics).
            now: pin the clock (tests); None uses the database's now().
            dry_run: count the eligible rows, delete nothing.
            budget: stop after so many rows or seconds (default: the sweep's own).
            stop: checked between batches; when set, the run ends after the batch in flight.
            on_batch: called after every batch with the result so far (progress bars).
            lock: first take the sweep's session-level advisory locks (:func:`lock_keys`) on
                the connection that runs the batches, released at the end; when another
                session holds one, the run is ``skipped``. A dry run takes no lock.
            waiting_since: when the run started waiting for its turn (``time.monotonic()``):
                its wait for the database counts from then (``since`` of
                :meth:`reaper.db.Database.session`).

        Returns:
            The run's :class:`SweepResult`; ``outcome`` is ``skipped`` when another session
            holds its lock, ``failure`` with ``error`` set when anything raised (a lock that
            does not hold across transactions raises LockNotHeld). Batches committed before a
            failure stay deleted and are counted.
        """
        result = SweepResult(sweep.name, sweep.table, sweep.reason, dry_run=dry_run)
        budget = budget or sweep.budget
        started = time.monotonic()
        bound = log.bind(sweep=sweep.name, table=sweep.table, reason=sweep.reason)
        keys = lock_keys(sweep) if lock and not dry_run else []
        bug: Exception | None = None
        run: Run | None = None
        try:
            with db.session(read_only=dry_run, since=waiting_since) as session:
                if keys and not session.try_advisory_locks(keys):
                    result.outcome = SKIPPED
                    result.holders = session.advisory_lock_holders(keys)
                    result.lock_holders = [h.pid for h in result.holders]
                else:
                    result.locked_at = time.time()
                    try:
                        db_now, refusal = self._clock(
                            db, session, sweep, options, now, metrics, dry_run=dry_run
                        )
                        result.cutoffs = cutoffs_at(sweep, db_now)
                        bound.debug("sweep_started", cutoffs=_iso(result.cutoffs), dry_run=dry_run)
                        run = Run(
                            sweep,
                            options,
                            session,
                            session.statements(sweep.predicate, None if dry_run else keep(sweep)),
                            dict(result.cutoffs),
                            result,
                            budget,
                            metrics=None if dry_run else metrics,
                            stop=stop,
                            on_batch=on_batch,
                            started=started,
                        )
                        if not dry_run:
                            if sweep.archive_file is not None:
                                run.before_commit = LineArchive(
                                    sweep.archive_file, sweep.name, sweep.table
                                )
                            run.pace = pacing.for_run(
                                self.pacing(db), session, options, sweep.name, metrics, stop
                            )
                            run.undeletable = self._of(db).undeletable
                            # A heap walk's extra connections (docs/engine.md, "Parallel
                            # heap ranges").
                            run.parallel = options.parallel
                            run.helper_session = db.helper_session
                        if refusal is None:
                            _sweep_batches(session, run, self.ledger(db, projected=dry_run))
                        else:
                            result.refusal = refusal  # a dry run: a real run would stop here
                    finally:
                        result.unlocked_at = time.time()
                        if keys:
                            session.release_advisory_locks()
        except Exception as exc:
            result.outcome = FAILURE
            result.error = str(exc) if isinstance(exc, errors.ReaperError) else repr(exc)
            result.error_type = type(exc).__name__
            result.sqlstate = exc.sqlstate if isinstance(exc, errors.ReaperError) else None
            if not isinstance(exc, errors.ReaperError):
                bug = exc
        if run is not None:
            _settle(db, run)
        result.seconds = time.monotonic() - started
        if metrics is not None and not dry_run:
            metrics.sweep_finished(result.sweep, result.outcome, result.seconds)
        _log_result(bound, result, bug)
        return result

    def _clock(
        self,
        db: Database,
        session: Session,
        sweep: Sweep,
        options: EngineOptions,
        now: datetime | None,
        metrics: Metrics | None,
        *,
        dry_run: bool,
    ) -> tuple[datetime, str | None]:
        """The database clock's reading that the run's cutoffs come from, checked against
        the host's clock and this process's earlier reading (:mod:`reaper.engine.clock`), the
        one chokepoint of the clock check: ``(now, None)``, or for a dry run whose clock a
        real run would refuse, ``(now, the refusal's line)``. A pinned ``now`` (tests) is
        not checked.

        Raises:
            ClockSkewRefused: a real run's clock is refused (counted in ``metrics``; a dry
                run counts nothing).
        """
        if now is not None:
            return utc_instant(session.now(now)), None
        reading = clock.read_clock(session.now, self._wall, self._monotonic)
        history = self._of(db).clock
        verdict = clock.judge_clock(sweep.name, reading, history.last, options.max_clock_skew)
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

    def run_all(
        self, db: Database, sweeps: Iterable[Sweep], options: EngineOptions, **kwargs: Any
    ) -> list[SweepResult]:
        """Run ``sweeps`` one after the other (already in dependency order); one failing never
        stops the next. Keyword arguments go to :meth:`run`."""
        return [self.run(db, s, options, **kwargs) for s in sweeps]


def run_sweep(
    db: Database,
    sweep: Sweep,
    options: EngineOptions,
    *,
    sweeper: Sweeper | None = None,
    **kwargs: Any,
) -> SweepResult:
    """One run of ``sweep`` by ``sweeper`` (:meth:`Sweeper.run`, which takes the keyword
    arguments). Without one, the run is judged alone: a new Sweeper, whose interlock ledger
    knows of no earlier deletion."""
    return (sweeper or Sweeper()).run(db, sweep, options, **kwargs)


def run_sweeps(
    db: Database,
    sweeps: Iterable[Sweep],
    options: EngineOptions,
    *,
    sweeper: Sweeper | None = None,
    **kwargs: Any,
) -> list[SweepResult]:
    """Run ``sweeps`` one after the other (already in dependency order) by one ``sweeper``
    (a new one when None), so that the interlock judges them together; one failing never
    stops the next. Keyword arguments go to :meth:`Sweeper.run`."""
    return (sweeper or Sweeper()).run_all(db, sweeps, options, **kwargs)


def _settle(db: Database, run: Run) -> None:
    """The rows of ``run`` not yet counted (its session failed before their durability was
    known, or the flush did not come in time): asked once more on a session of its own (a
    killed backend, a lost connection: the server that kept them answers), else dropped,
    never counted, with one ``deleted_rows_not_counted`` line."""
    if not run.uncounted:
        return
    try:
        with db.session() as session:
            if not run.count_durable(wait=DURABLE_WAIT_SECONDS, session=session):
                return
    except errors.ReaperError:
        pass
    run.drop_uncounted(
        "their durability could not be confirmed (the connection failed, or the server or "
        f"a standby did not flush them within {DURABLE_WAIT_SECONDS:.0f} s)"
    )


def _log_result(bound: Any, result: SweepResult, bug: Exception | None) -> None:
    """The run's one canonical line: ``sweep_finished``, ``sweep_skipped`` or
    ``sweep_failed``."""
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


def keep(sweep: Sweep) -> Keep:
    """What a run of ``sweep`` keeps of the rows it deletes: their keys when the
    ``batch_keys`` line would be shown (the runner's log at debug level: returning them costs
    a batch about what its RETURNING costs, bench B1), its archive table's rows and its
    archive file's lines."""
    return Keep(
        keys=logging.getLogger(_LOG_NAME).isEnabledFor(logging.DEBUG),
        key=sweep.key,
        archive=sweep.archive,
        lines=sweep.archive_file is not None,
    )


def lock_keys(sweep: Sweep) -> list[int]:
    """The advisory lock keys a run of ``sweep`` holds: its own, and those of the sweeps it
    runs after (``after``), sorted. Holding its predecessors' locks means a sweep never runs
    while one that must come first runs in any process (tokens while requests are deleted),
    and the reverse.
    """
    return sorted({advisory_lock_key(n) for n in (sweep.name, *sweep.after)})


def compute_cutoffs(session: Session, sweep: Sweep, now: datetime | None) -> dict[str, datetime]:
    """Each of the sweep's cutoffs: ``now - retention``, from one reading of the database
    clock (so that all cutoffs of a run agree), retentions as exact durations, as UTC
    instants: the arithmetic is done on UTC (no DST), never on the session zone's wall
    clock, so a cutoff is the same instant whatever the server, database, role, DSN or
    process time zone.
    """
    return cutoffs_at(sweep, utc_instant(session.now(now)))


def cutoffs_at(sweep: Sweep, db_now: datetime) -> dict[str, datetime]:
    """Each of the sweep's cutoffs at ``db_now`` (a reading of the database clock), as
    :func:`compute_cutoffs` computes them."""
    db_now = utc_instant(db_now)
    return {param: utc_instant(db_now - retention) for param, retention in sweep.retentions.items()}


def warn_if_superuser(db: Database) -> bool:
    """Log one warning when reaper's role is a superuser: it bypasses every grant and every
    row-level security policy, so nothing in the database limits what a sweep reads or
    deletes. True when it is (``reaper check`` fails then).

    Raises:
        DatabaseError: the role could not be read.
    """
    with db.session(read_only=True) as session:
        return warn_if_superuser_in(session)


def warn_if_superuser_in(session: Session) -> bool:
    """:func:`warn_if_superuser` on a session the caller holds (run-once's first checks).

    Raises:
        DatabaseError: the role could not be read.
    """
    superuser = session.fetch(WhoAmI, sqltext.ops("whoami"))[0].superuser
    if superuser:
        log.warning(
            "superuser_role",
            advice="run reaper as a role of its own that is not a superuser (see "
            "docs/security.md and grants.sql)",
        )
    return superuser


def refuse_unsweepable(session: Session, sweeps: Iterable[Sweep], *, trails: bool = False) -> None:
    """Check, before any sweep runs, that every sweep's table is one reaper can delete from
    (an ordinary table, or a partitioned or inheritance parent whose every member is one), and
    that a declared sweep reads only tables and columns of built-in types, and with
    ``trails`` (``run-once``) that the key columns and the archive table a sweep names exist
    and can take its rows: what :meth:`reaper.db.Session.statements` refuses, without
    composing the statements (the relations of a table that several sweeps delete from are
    read once).

    A table that does not exist is left to the run (which fails and says so).

    Raises:
        RelationRefused: the first sweep whose table is a view, a foreign table, a
            materialized view ... or covers one, or whose archive cannot take its rows; the
            message names the table and why.
        DatabaseError: the catalog could not be read.
    """
    read: set[TableName] = set()
    missing: set[TableName] = set()
    for sweep in sweeps:
        if sweep.table in missing:
            continue
        trail = keep(sweep) if trails and (sweep.archive is not None or sweep.key) else None
        try:
            session.refuse_unsweepable(sweep.predicate, trail, relations=sweep.table not in read)
        except errors.ObjectMissing:
            missing.add(sweep.table)
            continue
        except errors.RelationRefused as exc:
            raise errors.RelationRefused(f"sweep {sweep.name}: {exc}") from None
        read.add(sweep.table)


def _sweep_batches(session: Session, run: Run, ledger: DeletionLedger) -> None:
    """The body of a run, on its session, once its cutoffs and statements are known: the
    interlock, then the count (dry run) or the partitions and batches (results into
    ``run.result``). ``ledger``: the rows deleted per table by this process
    (:func:`reaper.engine.interlock.refuse_table_window`); a dry run's own ledger, of the
    rows it counted, for a dry run."""
    sweep, result = run.sweep, run.result
    # The full-table interlock sees the table whole, partitions that could be dropped included:
    # dropping every partition empties a table as surely as deleting every row.
    measure = measure_eligible(session, run.statements, run.params)
    threshold = sweep.max_eligible_fraction
    key = _table_key(session, sweep)
    if run.dry_run:
        _count(session, run, measure, threshold, ledger.window(key, measure.rows))
        if result.refusal is None:
            ledger.record(key, result.rows)
        return
    judge_table(
        session,
        sweep,
        run.statements,
        run.params,
        measure,
        threshold,
        ledger.window(key, measure.rows),
    )
    # What the progress bar counts toward: the sample the run takes anyway, never a count of
    # its own before the first delete.
    result.estimated_backlog = round(measure.eligible)
    before = result.rows
    try:
        _delete(session, run, measure)
    finally:
        ledger.record(key, result.rows - before)
        # The run's rows are counted once durable (docs/metrics.md): wait for the last ones
        # (on a session of its own when this one failed: Sweeper.run).
        run.count_durable(wait=DURABLE_WAIT_SECONDS)


def _table_key(session: Session, sweep: Sweep) -> str:
    """The swept table's key in a :class:`DeletionLedger`: its oid ("big" and "public.big"
    are one table)."""
    return str(session.scalar(sqltext.engine("table_oid"), {"table": regclass_text(sweep.table)}))


def _retire(session: Session, run: Run) -> None:
    """The partitions wholly past the cutoff, removed (or, for a dry run, listed) into the
    run's result; none of an ordinary table (:attr:`SweepStatements.ordinary`)."""
    if run.statements.ordinary:
        return
    sweep, result = run.sweep, run.result
    removed = retire.retire(
        session,
        sweep,
        result.cutoffs,
        dry_run=run.dry_run,
        metrics=run.metrics,
        stop=run.stop,
    )
    for p in removed:
        if not run.dry_run:
            result.rows += p.rows
        result.partitions.append(p.as_dict())


def _count(
    session: Session,
    run: Run,
    measure: EligibleMeasure,
    threshold: float,
    window: TableWindow,
) -> None:
    """A dry run: the partitions a run would retire, the rows it would delete, and
    (``result.refusal``) whether the full-table interlock would stop it before its first
    delete, judged as a real run of the same invocation would be (:func:`judge_table`): the
    rows that the dry run's earlier sweeps counted in this table count as deleted
    (``window``, of the projected ledger). Exact when the sweeps of a table delete different
    rows; when they share rows, the refusal may be projected where a real run would go on
    (never the other way round)."""
    result = run.result
    _retire(session, run)
    result.rows = session.count_eligible(run.statements, run.params)
    result.stopped_by = StopReason.DONE
    try:
        judge_table(
            session,
            run.sweep,
            run.statements,
            run.params,
            measure,
            threshold,
            window,
            projected=True,
            eligible=result.rows,
        )
    except errors.FullTableRefused as exc:
        result.refusal = str(exc)
        result.refusal_summary = exc.summary


def _delete(session: Session, run: Run, measure: EligibleMeasure) -> None:
    """Partitions retired, then the batches of every heap (results into ``run.result``)."""
    sweep, options, result = run.sweep, run.options, run.result
    _retire(session, run)
    if result.partitions:
        # The heaps that remain.
        run.statements = session.statements(sweep.predicate, keep(sweep))
    batch_size = sweep.batch_size
    sizer = BatchSizer(batch_size, options.statement_timeout_seconds)
    result.stopped_by = StopReason.DONE
    for hs in run.statements.heaps:
        strategy, fraction = choose_strategy(run, hs, sample=measure.samples.get(hs.heap.table))
        if strategy not in result.strategies:
            result.strategies.append(strategy)
        deleter = Deleter(run, hs, sizer)
        result.stopped_by = batch_strategy(strategy, options, fraction).run(deleter)
        if result.stopped_by != StopReason.DONE:
            break
    if not run.statements.heaps:
        result.strategies = [sweep.strategy]


def _iso(cutoffs: Mapping[str, datetime]) -> dict[str, str]:
    return {k: v.isoformat() for k, v in cutoffs.items()}

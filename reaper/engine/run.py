"""The engine: run one sweep, in short batches, and report what it did.

Every sweep has the same skeleton: compute the cutoffs once by the database clock and log
them; pick how to find the garbage (walk the heap in block ranges when it is a large part of
the table, follow the predicate's index when it is scattered); delete in bounded batches,
each its own transaction, until nothing is left, a budget is spent, or a stop is asked for;
report rows, batches, seconds and the outcome. A failure is caught here, logged, counted and
returned as a result: the next sweep runs as if nothing happened.
"""

from __future__ import annotations

import functools
import math
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import structlog

from reaper import errors, sqltext
from reaper.config.settings import FULL_TABLE_MIN_ROWS, Settings
from reaper.config.sweeps import Budget, Sweep
from reaper.db import (
    MIN_HEAP_WALK_VERSION,
    BatchRows,
    Database,
    HeapStatements,
    LockHolder,
    Session,
    SweepStatements,
    WhoAmI,
    advisory_lock_key,
    regclass_text,
    utc_instant,
)
from reaper.engine import pacing, partitions
from reaper.engine.sizing import BatchSizer, Splitter
from reaper.metrics import SKIP_REASONS, Metrics
from reaper.vocab import Outcome, Strategy

log = structlog.get_logger("reaper.runner")

SUCCESS, FAILURE, SKIPPED = Outcome.SUCCESS, Outcome.FAILURE, Outcome.SKIPPED

# Heap-walk block ranges stay within these bounds whatever the estimates say: a range of one
# block still makes progress; 16,384 blocks (128 MiB at 8 KiB) is about a second of scan.
MIN_BLOCKS_PER_BATCH = 1
MAX_BLOCKS_PER_BATCH = 16_384
# Never-analyzed table: the first range is this many blocks, and adapts from there.
FIRST_BLOCKS_UNKNOWN = 64
# The first range is at most this many blocks whatever the garbage fraction: scanning a block
# costs ~20 us here (bench/: 19,608 blocks of requests scanned in 0.39 s), so ~20 ms; a sparse
# table's first range was 16,384 blocks and 140-208 ms before this cap (bench --crossover).
FIRST_MAX_BLOCKS = 1024
# choose_strategy samples about this many heap blocks (TABLESAMPLE SYSTEM) to measure the
# garbage fraction: ~30,000 rows of a requests-like table, 6-10 ms on 10,000,000 rows (bench B5).
SAMPLE_BLOCKS = 300
# auto walks the heap when the index path would take more than this many batches, whatever
# the fraction: bench --crossover (2,000,000 requests, 5,000 rows per batch) had the index at
# 0.90-1.02x the walk's time for 4-8 batches and 1.28x for 20, as each batch re-reads the dead
# index entries of the batches before it.
MAX_INDEX_BATCHES = 10
# Why a row was skipped (reaper_skipped_rows_total's reason label): a writer held it (it is
# tried again next run), its delete ran past statement_timeout alone, a foreign key refused
# it (RESTRICT / NO ACTION from a table the sweep does not delete), or another error (a
# trigger that raises, a check in a cascade).
SKIP_LOCKED, SKIP_TIMEOUT, SKIP_FOREIGN_KEY, SKIP_ERROR = SKIP_REASONS
# SQLSTATEs of a lock wait past lock_timeout and of a foreign key violation.
LOCK_NOT_AVAILABLE, FOREIGN_KEY_VIOLATION = "55P03", "23503"


@dataclass
class SweepResult:
    """What one sweep run did.

    Attributes:
        rows: rows deleted (with ``dry_run``: rows eligible, none deleted).
        batches: batch transactions committed.
        seconds: wall time of the run.
        outcome: ``success``, ``failure`` or ``skipped``.
        strategy: ``heap`` or ``index`` (None for a dry run or a failure before the choice).
        stopped_by: why the loop ended: ``done``, ``max_rows``, ``max_seconds`` or ``stop``.
        cutoffs: parameter name -> cutoff timestamp used.
        error: the failure's one-line message (no password).
        error_type: the failure's exception class name (e.g. ``ConnectionFailed``).
        sqlstate: the failure's SQLSTATE when the database raised it (e.g. ``57014``).
        batch_seconds: duration of each batch transaction, in order.
        contended_batches: batches that met a row a writer held and were split.
        timed_out_batches: batches that ran past statement_timeout and were retried smaller.
        skipped: rows skipped by reason (``locked``, ``timeout``, ``foreign_key``, ``error``).
        lock_holders: for a skipped run, the pids of the sessions that held its locks.
        holders: for a skipped run, who held its locks (pid, user, application, client).
        partitions: partitions removed whole before the batches (reaper.engine.partitions), each
            ``{partition, action, rows, rows_source}``; with ``dry_run``, those it would
            remove, each ``{partition, action, estimated_rows}``.
        locked_at, unlocked_at: Unix times between which the run held its advisory locks
            and did its work (None when it never got them).
        refusal: with ``dry_run``, why a real run would stop before its first delete (the
            full-table interlock's one line), else None.
        note: with ``dry_run``, what the count leaves out (rows that the sweeps it runs
            after would make eligible), else None; set by the caller, which knows them.
    """

    sweep: str
    table: str
    reason: str
    rows: int = 0
    batches: int = 0
    seconds: float = 0.0
    outcome: str = SUCCESS
    strategy: str | None = None
    stopped_by: str | None = None
    cutoffs: dict[str, datetime] = field(default_factory=dict)
    error: str | None = None
    error_type: str | None = None
    sqlstate: str | None = None
    dry_run: bool = False
    batch_seconds: list[float] = field(default_factory=list)
    contended_batches: int = 0
    timed_out_batches: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    lock_holders: list[int] = field(default_factory=list)
    holders: list[LockHolder] = field(default_factory=list)
    locked_at: float | None = None
    unlocked_at: float | None = None
    partitions: list[dict[str, Any]] = field(default_factory=list)
    refusal: str | None = None
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: timestamps as ISO 8601, seconds rounded to milliseconds."""
        return {
            "sweep": self.sweep,
            "table": self.table,
            "reason": self.reason,
            "rows": self.rows,
            "batches": self.batches,
            "seconds": round(self.seconds, 3),
            "outcome": self.outcome,
            "strategy": self.strategy,
            "stopped_by": self.stopped_by,
            "dry_run": self.dry_run,
            "cutoffs": {k: v.isoformat() for k, v in self.cutoffs.items()},
            "error": self.error,
            "error_type": self.error_type,
            "sqlstate": self.sqlstate,
            "lock_holders": [h.as_dict() for h in self.holders],
            "partitions": self.partitions,
            "skipped": dict(self.skipped),
            **({"refusal": self.refusal, "note": self.note} if self.dry_run else {}),
        }


class _Progress:
    """Counts one run's batches into its result, its metrics and its log."""

    def __init__(
        self,
        result: SweepResult,
        metrics: Metrics | None,
        budget: Budget,
        stop: threading.Event | None,
        on_batch: Callable[[SweepResult], None] | None,
    ) -> None:
        self.result = result
        self.metrics = metrics
        self.budget = budget
        self.stop = stop
        self.on_batch = on_batch
        self.started = time.monotonic()
        # Called before each batch (reaper.engine.pacing): waits while the database asks to.
        self.pace: pacing.Pacer | None = None
        # While the pacer sees live traffic, a batch aims at this many seconds.
        self.busy_batch_seconds: float | None = None

    def busy_seconds(self) -> float | None:
        """The seconds a batch aims at while other sessions use the database (None: not
        busy now, or load pacing off)."""
        if self.pace is None or not self.pace.busy:
            return None
        return self.busy_batch_seconds

    def batch(self, rows: int, seconds: float) -> None:
        r = self.result
        r.rows += rows
        r.batches += 1
        r.batch_seconds.append(seconds)
        if self.metrics is not None:
            self.metrics.batch_finished(r.sweep, r.table, r.reason, rows, seconds)
        log.debug("batch_deleted", sweep=r.sweep, rows=rows, seconds=round(seconds, 4))
        if self.on_batch is not None:
            self.on_batch(r)

    def skipped(self, heap: str, tid: tuple[int, int], exc: errors.DatabaseError) -> None:
        """A row whose delete failed alone: logged once (with the SQLSTATE) and counted."""
        r = self.result
        reason = skip_reason(exc)
        r.skipped[reason] = r.skipped.get(reason, 0) + 1
        if self.metrics is not None:
            self.metrics.row_skipped(r.table, reason)
        # A held row is expected (writers are busy) and tried again next run: info, not warning.
        (log.info if reason == SKIP_LOCKED else log.warning)(
            "row_skipped", sweep=r.sweep, table=r.table, heap=heap, tid=f"({tid[0]},{tid[1]})",
            reason=reason, sqlstate=exc.sqlstate, error=str(exc),
        )

    def should_stop(self) -> str | None:
        """The reason to stop before the next batch, or None to go on (after any wait the
        pacer asks for: a run still waiting for a standby when its budget ends stops with
        ``replica_lag``)."""
        stopped = self._limits()
        if stopped is not None or self.pace is None:
            return stopped
        last = self.result.batch_seconds[-1] if self.result.batches else None
        deadline = None
        if self.budget.max_seconds is not None:
            deadline = self.started + self.budget.max_seconds
        return self.pace(last, deadline) or self._limits()

    def _limits(self) -> str | None:
        if self.stop is not None and self.stop.is_set():
            return "stop"
        if self.budget.max_rows is not None and self.result.rows >= self.budget.max_rows:
            return "max_rows"
        elapsed = time.monotonic() - self.started
        if self.budget.max_seconds is not None and elapsed >= self.budget.max_seconds:
            return "max_seconds"
        return None


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
    db_now = utc_instant(session.now(now))
    return {
        param: utc_instant(db_now - retention) for param, retention in sweep.retentions.items()
    }


def warn_if_superuser(db: Database) -> bool:
    """Log one warning when reaper's role is a superuser: it bypasses every grant and every
    row-level security policy, so nothing in the database limits what a sweep reads or
    deletes. True when it is (``reaper check`` fails then).

    Raises:
        DatabaseError: the role could not be read.
    """
    with db.session() as session:
        superuser = session.fetch(WhoAmI, sqltext.ops("whoami"))[0].superuser
    if superuser:
        log.warning(
            "superuser_role",
            advice="run reaper as a role of its own that is not a superuser (see "
                   "docs/security.md and grants.sql)",
        )
    return superuser


def skip_reason(exc: errors.DatabaseError) -> str:
    """The ``reaper_skipped_rows_total`` reason of a row whose delete failed with ``exc``."""
    if isinstance(exc, errors.StatementCanceled):
        return SKIP_LOCKED if exc.sqlstate == LOCK_NOT_AVAILABLE else SKIP_TIMEOUT
    if isinstance(exc, errors.ForeignKeyConflict) or exc.sqlstate == FOREIGN_KEY_VIOLATION:
        return SKIP_FOREIGN_KEY
    return SKIP_ERROR


_HELD_TUPLE = re.compile(
    r'while (?:deleting|updating|locking) tuple \((\d+),(\d+)\) in relation "((?:[^"]|"")+)"'
)


def held_row(exc: errors.DatabaseError, heap: str) -> tuple[int, int] | None:
    """The tuple id of the row of ``heap`` whose lock a batch waited for past lock_timeout,
    as the server's CONTEXT line names it; None for another failure or relation."""
    if exc.sqlstate != LOCK_NOT_AVAILABLE or not exc.server_context:
        return None
    m = _HELD_TUPLE.search(exc.server_context)
    if m is None or m.group(3).replace('""', '"') != heap:
        return None
    return int(m.group(1)), int(m.group(2))


def isolable(exc: errors.DatabaseError) -> bool:
    """Whether ``exc`` may be the failure of some rows of a batch (split the batch to find
    them) rather than of the whole sweep (no connection, no privilege, a missing object, a
    read-only server, a table lock held past lock_timeout: the run fails).

    A lock wait that timed out names the tuple it waited for in the server's CONTEXT (a row
    a writer holds, of the swept table or of one a cascade reaches); one that names none was
    a wait for a table's lock (lock_heap.sql), which no row of the batch is to blame for."""
    if exc.sqlstate == LOCK_NOT_AVAILABLE:
        return _HELD_TUPLE.search(exc.server_context or "") is not None
    return isinstance(exc, (errors.StatementCanceled, errors.ForeignKeyConflict)) or (
        type(exc) is errors.DatabaseError
    )


def run_failure(exc: errors.DatabaseError) -> errors.DatabaseError:
    """``exc`` as the run's failure: a table lock held past lock_timeout (a lock timeout that
    names no row, :func:`isolable`) says so, since the server's own line does not."""
    if exc.sqlstate != LOCK_NOT_AVAILABLE or isolable(exc):
        return exc
    out = errors.LockTimeout(
        f"{exc}: another session held a lock on the whole table (a migration, LOCK TABLE) "
        "past lock_timeout (--lock-timeout); no row was skipped, the next run tries again"
    )
    out.sqlstate, out.server_context = exc.sqlstate, exc.server_context
    return out


def choose_strategy(
    session: Session,
    stmts: SweepStatements,
    hs: HeapStatements,
    params: Mapping[str, Any],
    settings: Settings,
    strategy: str | None = None,
    batch_size: int | None = None,
    sample: tuple[int, int, float] | None = None,
) -> tuple[str, float | None]:
    """``(strategy, fraction)`` for one heap ``hs``: ``heap`` or ``index``, and the fraction
    of the heap that is garbage, measured on a sample of about SAMPLE_BLOCKS heap blocks
    (None when not measured).

    The heap walk reads every block once, so it wins when garbage is at least
    ``heap_walk_threshold`` of the table; the index wins when garbage is scattered (bench/
    ``--crossover`` measures where). The fraction is measured, not asked of the planner: the
    planner's estimate of a predicate with a subquery parameter can be off a hundredfold
    (bench B3: 1,376,411 estimated, 10,000 real), and a block sample costs a few milliseconds.
    The index path also gives way when the sample projects more than MAX_INDEX_BATCHES
    batches of ``batch_size`` rows (default ``settings.batch_size``): each index batch re-reads
    the dead index entries of the batches before it. Servers before PostgreSQL 14 have no TID
    range scan and always use the index. ``strategy`` (a sweep's own, from its
    ``[sweeps.NAME]`` table) overrides ``settings.strategy``. ``sample``: ``(eligible,
    sampled, percent)`` of this heap already measured (:func:`measure_eligible`), reused.
    """
    wanted = strategy or settings.strategy
    if session.server_version < MIN_HEAP_WALK_VERSION or wanted == "index":
        # A forced index path needs no sample: the fraction only sizes the walk's first range.
        return "index", None
    stats = hs.heap.stats
    if stats.blocks <= FIRST_BLOCKS_UNKNOWN and wanted == "auto":
        # A table smaller than one first heap range: the walk saves nothing.
        return "index", None
    if stats.blocks == 0:
        return wanted, 0.0
    if sample is not None:
        eligible, sampled, percent = sample
    else:
        percent = min(100.0, 100.0 * SAMPLE_BLOCKS / stats.blocks)
        eligible, sampled = session.sample_eligible(stmts, hs, params, percent)
    fraction = eligible / sampled if sampled else 0.0
    if wanted != "auto":
        return wanted, fraction
    projected_batches = eligible * 100.0 / percent / (batch_size or settings.batch_size)
    if fraction >= settings.heap_walk_threshold or projected_batches > MAX_INDEX_BATCHES:
        return "heap", fraction
    return "index", fraction


@dataclass(frozen=True)
class EligibleMeasure:
    """How much of a sweep's table its predicate matches, from a block sample of each heap.

    Attributes:
        samples: heap (qualified name) -> ``(eligible, sampled, percent)`` of its sample.
        rows: rows of the table, projected from the samples.
        eligible: eligible rows, projected from the samples.
        counted: rows and eligible rows were counted, not projected (:func:`judge_table`).
    """

    samples: dict[str, tuple[int, int, float]]
    rows: float
    eligible: float
    counted: bool = False

    @property
    def fraction(self) -> float:
        """Eligible rows / rows (0 for an empty table)."""
        return self.eligible / self.rows if self.rows else 0.0


def measure_eligible(
    session: Session, stmts: SweepStatements, params: Mapping[str, Any]
) -> EligibleMeasure:
    """Sample about SAMPLE_BLOCKS blocks of each heap the sweep deletes from (all of a heap
    that small; TABLESAMPLE SYSTEM reads only those) and project rows and eligible rows. The
    same samples feed :func:`choose_strategy`: one measurement per heap per run."""
    samples: dict[str, tuple[int, int, float]] = {}
    rows = eligible = 0.0
    for hs in stmts.heaps:
        blocks = hs.heap.stats.blocks
        if blocks <= 0:
            continue
        percent = min(100.0, 100.0 * SAMPLE_BLOCKS / blocks)
        got, sampled = session.sample_eligible(stmts, hs, params, percent)
        samples[hs.heap.qualified] = (got, sampled, percent)
        rows += sampled * 100.0 / percent
        eligible += got * 100.0 / percent
    return EligibleMeasure(samples, rows, eligible)


def refuse_full_table(sweep: Sweep, measure: EligibleMeasure, threshold: float) -> None:
    """The full-table interlock: stop a run before its first delete when at least
    ``threshold`` of a table of FULL_TABLE_MIN_ROWS rows or more is eligible (a predicate
    that matches everything, a retention in the wrong unit). ``threshold`` 1 is the opt-in:
    the run may empty the table.

    Raises:
        FullTableRefused: one line naming the sweep, the fraction and the setting.
    """
    if threshold >= 1.0 or measure.rows < FULL_TABLE_MIN_ROWS:
        return
    if measure.fraction < threshold:
        return
    raise errors.FullTableRefused(
        f"sweep {sweep.name}: {measure.fraction:.1%} of {sweep.table} "
        f"({'' if measure.counted else 'about '}{measure.eligible:,.0f} of "
        f"{measure.rows:,.0f} rows, {'counted' if measure.counted else 'sampled'}) "
        "is eligible, at or "
        f"above max_eligible_fraction {threshold:g}; nothing was deleted. If that is meant, "
        f"set max_eligible_fraction = 1 in [sweeps.{sweep.name}] (or "
        "--max-eligible-fraction / REAPER_MAX_ELIGIBLE_FRACTION) for this run"
    )


# How long the daemon judges a table's deletions together (seconds): a table of N rows at the
# window's start loses at most max_eligible_fraction of N in that window, however many sweeps
# or runs share the work. A run-once invocation is one window (its Database lives that long).
LEDGER_WINDOW_SECONDS = 24 * 3600.0


@dataclass
class _TableWindow:
    """One table's window: when it began (monotonic seconds), its rows then (projected from
    the sample), and the rows deleted from it since by any sweep of this process."""

    started: float
    rows: float
    deleted: int = 0


class DeletionLedger:
    """Per table, the rows deleted in the current window of LEDGER_WINDOW_SECONDS, shared by
    every run on one :class:`Database` (one per process): the full-table interlock judges
    the table, not one run, so splitting the work over sweeps or runs does not get past it.
    """

    def __init__(self, window_seconds: float = LEDGER_WINDOW_SECONDS) -> None:
        self.window_seconds = window_seconds
        self._tables: dict[str, _TableWindow] = {}
        self._lock = threading.Lock()

    def window(self, table: str, rows: float) -> _TableWindow:
        """``table``'s current window; a new one (its size ``rows``) when there was none or
        the last is older than the window."""
        with self._lock:
            now = time.monotonic()
            entry = self._tables.get(table)
            if entry is None or now - entry.started >= self.window_seconds:
                entry = self._tables[table] = _TableWindow(now, rows)
            return entry

    def record(self, table: str, rows: int) -> None:
        """Count ``rows`` deleted from ``table`` in its current window."""
        with self._lock:
            entry = self._tables.get(table)
            if entry is not None:
                entry.deleted += rows


_LEDGERS: weakref.WeakKeyDictionary[Database, dict[bool, DeletionLedger]] = (
    weakref.WeakKeyDictionary()
)
_LEDGERS_LOCK = threading.Lock()


def ledger_of(db: Database, *, projected: bool = False) -> DeletionLedger:
    """The :class:`DeletionLedger` of ``db`` (made on first use, lives as long as ``db``).
    ``projected``: the dry runs' own ledger, of the rows they counted as a run would delete
    them, apart from what real runs deleted."""
    with _LEDGERS_LOCK:
        ledgers = _LEDGERS.setdefault(db, {})
        ledger = ledgers.get(projected)
        if ledger is None:
            ledger = ledgers[projected] = DeletionLedger()
        return ledger


def refuse_table_window(
    sweep: Sweep, measure: EligibleMeasure, threshold: float, window: _TableWindow,
    *, projected: bool = False,
) -> None:
    """The full-table interlock across runs: once this process deleted rows from the table in
    the window, stop a run before its first delete when the rows it would leave (rows now
    minus rows eligible now) are at most ``1 - threshold`` of the table's rows at the
    window's start (a table of FULL_TABLE_MIN_ROWS rows or more then). Without inserts
    meanwhile that is (deleted in the window + eligible now) / rows at the start >=
    ``threshold``; rows inserted since count as rows kept, so a busy table whose rows come and
    go many times a day is not refused. ``threshold`` 1 is the opt-in. ``projected``: the
    window counts what a dry run's earlier sweeps would delete (the message says so).

    Raises:
        FullTableRefused: one line naming the sweep, the figures and the setting.
    """
    if threshold >= 1.0 or window.rows < FULL_TABLE_MIN_ROWS or not window.deleted:
        return
    left = max(0.0, measure.rows - measure.eligible)
    if left / window.rows > 1.0 - threshold:
        return
    deleted = (
        f"{window.deleted:,} rows that the sweeps before it would delete from {sweep.table}"
        if projected
        else f"{window.deleted:,} rows already deleted from {sweep.table} by this process"
    )
    raise errors.FullTableRefused(
        f"sweep {sweep.name}: {deleted}, and {'' if measure.counted else 'about '}"
        f"{measure.eligible:,.0f} of the {measure.rows:,.0f} left are eligible "
        f"({'counted' if measure.counted else 'sampled'}): the run would leave "
        f"{left / window.rows:.1%} of its {window.rows:,.0f} rows, so "
        f"{1 - left / window.rows:.1%} would be gone, at or above "
        f"max_eligible_fraction {threshold:g}; nothing was deleted. If that is meant, set "
        f"max_eligible_fraction = 1 in [sweeps.{sweep.name}] (or --max-eligible-fraction / "
        "REAPER_MAX_ELIGIBLE_FRACTION)"
    )


# A block sample's projection of a table's rows was 5% off on the demo's 124,851-row nodes
# table (131,420), enough to let a run past max_eligible_fraction 0.95: a judgement whose
# sampled figures come within this fraction of the threshold is made again on counted rows.
EXACT_MARGIN = 0.1


def judge_table(
    session: Session, sweep: Sweep, stmts: SweepStatements, params: Mapping[str, Any],
    measure: EligibleMeasure, threshold: float, window: _TableWindow, *,
    projected: bool = False, eligible: int | None = None,
) -> None:
    """The full-table interlock, before a run's first delete (:func:`refuse_full_table`, then
    :func:`refuse_table_window`), for a real run and a dry run alike.

    On the sample's projection when it is clearly below the threshold; when it comes within
    :data:`EXACT_MARGIN` of it, on counts: the table's rows now (a full count of each heap)
    and its eligible rows (``eligible`` if already counted, as a dry run has). The window's
    rows at its start are then the larger of the sample's projection then and the rows now
    plus those deleted since, so that a sample that was low lets no run through; a high one
    can only refuse a run that the counts alone would let go on (a run deleting nearly all
    of the table then needs max_eligible_fraction 1 anyway). If counting fails (a
    statement_timeout), the projection judges. ``projected``: a dry run, whose window holds
    what its earlier sweeps would delete, still in the table it counts.

    Raises:
        FullTableRefused: as :func:`refuse_full_table` and :func:`refuse_table_window`.
    """
    if threshold >= 1.0:
        return
    pending = window.deleted if projected else 0
    rows = max(measure.rows - pending, 0.0)
    sampled = EligibleMeasure(measure.samples, rows, min(measure.eligible, rows))
    gone = sampled.fraction
    if window.deleted and window.rows:
        gone = max(gone, 1.0 - max(rows - sampled.eligible, 0.0) / window.rows)
    if gone < threshold - EXACT_MARGIN:
        measure = sampled
    else:
        try:
            now = session.count_rows(stmts)
            if eligible is None:
                eligible = session.count_eligible(stmts, params)
        except errors.ReaperError as exc:
            log.warning("interlock_count_failed", sweep=sweep.name, table=sweep.table,
                        error=str(exc), sqlstate=exc.sqlstate)
            measure = sampled
        else:
            rows = float(max(now - pending, 0))
            measure = EligibleMeasure(measure.samples, rows, float(min(eligible, rows)),
                                      counted=True)
            start = max(window.rows, now + (0 if projected else window.deleted))
            window = _TableWindow(window.started, start, window.deleted)
    refuse_full_table(sweep, measure, threshold)
    refuse_table_window(sweep, measure, threshold, window, projected=projected)


class _Deleter:
    """One heap's batches: row limits from the sizer, a failing batch split until the row
    that fails is alone, that row skipped (its tuple id left out of every later batch of the
    run). Never repeats a failing batch unchanged: each retry has half the rows, or leaves
    out the row that failed alone."""

    def __init__(
        self,
        session: Session,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
        sizer: BatchSizer,
        progress: _Progress,
    ) -> None:
        self.session, self.stmts, self.hs, self.params = session, stmts, hs, params
        self.sizer, self.progress = sizer, progress
        self.splitter = Splitter()
        # The row limit while the database is busy (None: not busy, or not measured yet).
        self.busy_limit: int | None = None
        self.skip: list[tuple[int, int]] = []
        # Why the last attempt failed (a skip reason), None after a success.
        self.last_failure: str | None = None

    def limit(self) -> int:
        """The next batch's row limit: the sizer's (or the splitter's while a batch fails),
        and while the database is busy (:meth:`_Progress.busy_seconds`) at most the busy
        limit, which follows the batches' durations toward that target (:meth:`_measured`)."""
        limit = self.splitter.next_limit(self.sizer.size)
        if self.progress.busy_seconds() is None:
            self.busy_limit = None
        elif self.busy_limit is not None:
            limit = min(limit, self.busy_limit)
        return limit

    def trusts_ranges(self) -> bool:
        """Whether a heap-walk batch may try its whole range in place first
        (heap_range_batch.sql, which has no row limit): not while the sizer is below the batch
        size after a timeout, nor while a failing batch is being split. Deletes that cost
        that much (a cascade, a trigger) would time out in the range form every time, and each
        batch would cost a whole statement_timeout before its limited retry."""
        return self.sizer.size >= self.sizer.ceiling and self.splitter.limit is None

    def _measured(self, limit: int, seconds: float) -> None:
        """While busy, the next limit: this batch's ``limit`` scaled toward the busy target
        by its ``seconds`` (at most 2x either way per batch, so that one slow batch cannot
        swing it; the fixed cost of a batch, its round trips, is part of what is measured,
        so a target below it settles at MIN_BUSY_ROWS)."""
        busy = self.progress.busy_seconds()
        if busy is None or seconds <= 0:
            return
        scale = min(max(busy / seconds, 0.5), 2.0)
        self.busy_limit = min(max(MIN_BUSY_ROWS, int(limit * scale)), self.sizer.ceiling)

    def attempt(
        self, limit: int, batch: Callable[[], BatchRows], first_victim: Callable[[], Any]
    ) -> BatchRows | None:
        """Run one batch of ``limit`` rows (``batch``), or, at one row, isolate the row
        (``first_victim`` finds it). Returns what it did, or None when it failed (the next
        attempt is smaller: :attr:`limit`)."""
        t0 = time.monotonic()
        self.last_failure = None
        if limit <= 1:
            return self._one_row(first_victim, t0)
        try:
            rows = batch()
        except errors.DatabaseError as exc:
            self._failed(exc, limit)
            return None
        seconds = time.monotonic() - t0
        self.splitter.succeeded()
        self.sizer.succeeded(seconds)
        self._measured(limit, seconds)
        self.progress.batch(rows.deleted, seconds)
        return rows

    def _failed(self, exc: errors.DatabaseError, limit: int) -> None:
        stop = self.progress.stop
        if not isolable(exc) or (stop is not None and stop.is_set()):
            failure = run_failure(exc)
            if failure is exc:
                raise exc
            raise failure from exc
        r = self.progress.result
        reason = skip_reason(exc)
        self.last_failure = reason
        if reason == SKIP_TIMEOUT:
            r.timed_out_batches += 1
            self.sizer.timed_out()
        elif reason == SKIP_LOCKED:
            r.contended_batches += 1
        held = held_row(exc, self.hs.heap.name)
        if held is not None and held not in self.skip:
            # The server named the row a writer holds: leave it out, and retry the batch
            # without it (not split: the other rows are not in the way).
            self.skip.append(held)
            self.progress.skipped(self.hs.heap.qualified, held, exc)
            return
        self.splitter.failed(limit)
        log.debug("batch_split", sweep=r.sweep, heap=self.hs.heap.qualified, rows=limit,
                  reason=reason, sqlstate=exc.sqlstate, error=str(exc))

    def _one_row(self, first_victim: Callable[[], Any], t0: float) -> BatchRows | None:
        tid = first_victim()
        if tid is None:
            self.splitter.succeeded()
            return BatchRows(0, 0, None)
        try:
            deleted = self.session.delete_row(self.stmts, self.hs, self.params, tid)
        except errors.DatabaseError as exc:
            stop = self.progress.stop
            if not isolable(exc) or (stop is not None and stop.is_set()):
                failure = run_failure(exc)
                if failure is exc:
                    raise
                raise failure from exc
            if skip_reason(exc) == SKIP_TIMEOUT:
                self.progress.result.timed_out_batches += 1
            self.skip.append(tid)
            self.progress.skipped(self.hs.heap.qualified, tid, exc)
            self.splitter.succeeded()
            return BatchRows(0, 1, tid)
        seconds = time.monotonic() - t0
        self.splitter.succeeded()
        self.sizer.succeeded(seconds)
        self.progress.batch(deleted, seconds)
        return BatchRows(deleted, 1, tid)


# Heap-walk ranges are sized to hold this fraction of a batch's row limit: a range that holds
# more than the limit is deleted, rolled back and redone by tuple id (heap_batch.sql), about
# three times the cost of the plain range delete, so a range aimed at the limit itself
# overshoots on every other batch (bench B1 at a fill of 1.0: 5.8x one plain DELETE, every
# batch redone). At 0.8 the usual variation of garbage per block stays under the limit.
RANGE_FILL = 0.8
# While the database is busy, a batch's row limit follows busy_batch_seconds, but never
# below this many rows (a batch of a few rows would cost more in round trips than it deletes).
MIN_BUSY_ROWS = 100


class BatchStrategy(Protocol):
    """How one heap's batches find their victims: :class:`HeapWalk` or :class:`IndexBatches`
    (:func:`choose_strategy` picks one per heap)."""

    def run(self, deleter: _Deleter) -> str:
        """Delete the heap's garbage with ``deleter``'s batches; returns the stop reason."""
        ...


@dataclass(frozen=True)
class HeapWalk:
    """The heap walk (:attr:`Strategy.HEAP`): tuple-id ranges, front to back.

    Attributes:
        target_seconds: how long a batch aims to take (``--batch-target-seconds``; while the
            database is busy, ``--busy-batch-seconds`` instead).
        estimated_fraction: the garbage fraction of the heap's sample (sizes the first
            range; None: unknown).
    """

    target_seconds: float
    estimated_fraction: float | None = None

    def run(self, deleter: _Deleter) -> str:
        return _walk_heap(deleter, self.target_seconds, self.estimated_fraction)


@dataclass(frozen=True)
class IndexBatches:
    """The index path (:attr:`Strategy.INDEX`): batches through the predicate's index."""

    def run(self, deleter: _Deleter) -> str:
        return _follow_index(deleter)


def batch_strategy(name: str, settings: Settings, fraction: float | None) -> BatchStrategy:
    """The :class:`BatchStrategy` named ``name`` (``heap`` or ``index``)."""
    if name == Strategy.HEAP:
        return HeapWalk(settings.batch_target_seconds.total_seconds(), fraction)
    return IndexBatches()


def _walk_heap(
    deleter: _Deleter,
    target_seconds: float,
    estimated_fraction: float | None = None,
) -> str:
    """Delete one heap's garbage block range by block range, front to back; returns
    stopped_by.

    A batch deletes at most the sizer's limit of rows: when a range holds more garbage, the
    next batch starts right after the last row selected. A range is sized to hold about that
    many garbage rows and to take about ``target_seconds``, from the catalog's rows per block,
    then from what each batch found; a range that holds no garbage never shrinks the next.
    """
    session, stmts, hs, params = deleter.session, deleter.stmts, deleter.hs, deleter.params
    progress = deleter.progress
    stats = hs.heap.stats
    end = stats.blocks
    size = deleter.sizer.size * RANGE_FILL
    if stats.rows_per_block > 0:
        fraction = estimated_fraction if estimated_fraction else 1.0
        garbage_per_block = max(stats.rows_per_block * fraction, 1e-3)
        span = math.ceil(size / garbage_per_block)
    else:
        span = FIRST_BLOCKS_UNKNOWN
    span = min(max(span, MIN_BLOCKS_PER_BATCH), FIRST_MAX_BLOCKS)
    pos = (0, 0)
    while pos[0] < end:
        stopped = progress.should_stop()
        if stopped:
            return stopped
        last_block = min(pos[0] + span, end)
        limit = deleter.limit()
        target = progress.busy_seconds() or target_seconds
        t0 = time.monotonic()
        start = pos
        rows = deleter.attempt(
            limit,
            functools.partial(
                session.delete_heap_batch, stmts, hs, params, start, last_block, limit,
                list(deleter.skip), deleter.trusts_ranges(),
            ),
            functools.partial(
                session.first_victim, stmts, hs, params, list(deleter.skip), start, last_block
            ),
        )
        seconds = time.monotonic() - t0
        if rows is None:
            if deleter.last_failure == SKIP_TIMEOUT:
                # Past statement_timeout: the range's scan may be what is slow, not the rows.
                span = max(MIN_BLOCKS_PER_BATCH, span // 2)
            continue
        if rows.selected >= limit and rows.last is not None:
            # The range holds more garbage than one batch may delete: go on right after it.
            pos = (rows.last[0], rows.last[1] + 1)
            covered = rows.last[0] - start[0] + 1
        else:
            pos = (last_block, 0)
            covered = last_block - start[0]
        # Resize the next range: toward the next limit's rows and target_seconds, at most 2x
        # either way per step so one odd range (a run of live rows, a checkpoint) cannot swing
        # it wildly. A range without garbage grows (when it was quick) and never shrinks.
        want = deleter.limit() * RANGE_FILL
        if rows.selected >= limit:
            # Capped: the density is known from where the batch stopped; a range sized by
            # it holds about one batch (no damping: a range far too large for the garbage in
            # it would be deleted and rolled back again, heap_range_batch.sql).
            span = min(max(math.ceil(want * covered / rows.selected), MIN_BLOCKS_PER_BATCH),
                       MAX_BLOCKS_PER_BATCH)
            continue
        if rows.selected:
            scale = want * covered / rows.selected / max(span, 1)
            if seconds > 0:
                scale = min(scale, target / seconds)
        else:
            scale = 2.0 if seconds < target else 1.0
        span = int(span * min(max(scale, 0.5), 2.0))
        span = min(max(span, MIN_BLOCKS_PER_BATCH), MAX_BLOCKS_PER_BATCH)
    return "done"


def _follow_index(deleter: _Deleter) -> str:
    """Delete one heap's garbage through the predicate's index, at most the sizer's limit of
    rows per batch, until a batch comes back short; returns stopped_by."""
    session, stmts, hs, params = deleter.session, deleter.stmts, deleter.hs, deleter.params
    progress = deleter.progress
    while True:
        stopped = progress.should_stop()
        if stopped:
            return stopped
        limit = deleter.limit()
        rows = deleter.attempt(
            limit,
            functools.partial(
                session.delete_index_batch, stmts, hs, params, limit, list(deleter.skip)
            ),
            functools.partial(session.first_victim, stmts, hs, params, list(deleter.skip)),
        )
        if rows is None:
            continue
        if rows.selected < limit:
            return "done"


def run_sweep(
    db: Database,
    sweep: Sweep,
    settings: Settings,
    *,
    metrics: Metrics | None = None,
    now: datetime | None = None,
    dry_run: bool = False,
    budget: Budget | None = None,
    stop: threading.Event | None = None,
    on_batch: Callable[[SweepResult], None] | None = None,
    lock: bool = True,
) -> SweepResult:
    """Run one sweep to completion, budget or stop. Never raises for a sweep's failure.

    Args:
        db: the database to sweep.
        sweep: what to delete.
        settings: retentions, batch size, strategy.
        metrics: counters to update per batch and per run (None: no metrics).
        now: pin the clock (tests); None uses the database's now().
        dry_run: count the eligible rows, delete nothing.
        budget: stop after so many rows or seconds (default: the sweep's per-run budget in
            ``settings``, else the global one).
        stop: checked between batches; when set, the run ends after the batch in flight.
        on_batch: called after every batch with the result so far (progress bars).
        lock: first take the sweep's session-level advisory locks (:func:`lock_keys`) on the
            connection that runs the batches, released at the end; when another session
            holds one, the run is ``skipped``. A dry run takes no lock.

    Returns:
        The run's :class:`SweepResult`; ``outcome`` is ``skipped`` when another session holds
        its lock, ``failure`` with ``error`` set when anything raised (a lock that does not
        hold across transactions raises LockNotHeld). Batches committed before a failure
        stay deleted and are counted.
    """
    result = SweepResult(sweep.name, sweep.table, sweep.reason, dry_run=dry_run)
    progress = _Progress(
        result,
        None if dry_run else metrics,
        budget or sweep.budget,
        stop,
        on_batch,
    )
    bound = log.bind(sweep=sweep.name, table=sweep.table, reason=sweep.reason)
    started = time.monotonic()
    keys = lock_keys(sweep) if lock and not dry_run else []
    bug: Exception | None = None
    try:
        with db.session() as session:
            if keys and not session.try_advisory_locks(keys):
                result.outcome = SKIPPED
                result.holders = session.advisory_lock_holders(keys)
                result.lock_holders = [h.pid for h in result.holders]
            else:
                result.locked_at = time.time()
                if not dry_run:
                    progress.pace = pacing.for_run(db, session, settings, sweep.name, metrics, stop)
                    progress.busy_batch_seconds = settings.busy_batch_seconds.total_seconds()
                try:
                    _sweep_batches(
                        session, sweep, settings, result, progress, now, bound,
                        ledger_of(db, projected=dry_run),
                    )
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
    result.seconds = time.monotonic() - started
    if metrics is not None and not dry_run:
        metrics.sweep_finished(result.sweep, result.outcome, result.seconds)
    fields = dict(
        rows=result.rows,
        batches=result.batches,
        seconds=round(result.seconds, 3),
        cutoffs=_iso(result.cutoffs),
        strategy=result.strategy,
        contended_batches=result.contended_batches,
        timed_out_batches=result.timed_out_batches,
        skipped=result.skipped,
        dry_run=dry_run,
    )
    if result.outcome == FAILURE:
        # A bug (not one of reaper's own errors) keeps its traceback; expected failures
        # stay one line, a database error with its SQLSTATE.
        traceback = {"exc_info": bug} if bug is not None else {}
        bound.error("sweep_failed", error=result.error, error_type=result.error_type,
                    sqlstate=result.sqlstate, **traceback, **fields)
    elif result.outcome == SKIPPED:
        # Another process (a replica, a run-once by hand) runs this sweep or one it depends
        # on: not an error, the next scheduled run tries again. Or any login squats on the
        # (publicly computable) keys: the holder is named so that it can be found.
        bound.info(
            "sweep_skipped", lock_holders=[h.as_dict() for h in result.holders],
            seconds=fields["seconds"],
        )
    else:
        bound.info(
            "sweep_finished", stopped_by=result.stopped_by, locked_at=result.locked_at,
            unlocked_at=result.unlocked_at, **fields,
        )
    return result


def _sweep_batches(
    session: Session,
    sweep: Sweep,
    settings: Settings,
    result: SweepResult,
    progress: _Progress,
    now: datetime | None,
    bound: Any,
    ledger: DeletionLedger,
) -> None:
    """The body of a run, on one session: cutoffs, strategy, batches (results into ``result``).
    ``ledger``: the rows deleted per table by this process (:func:`refuse_table_window`); a
    dry run's own ledger, of the rows it counted, for a dry run."""
    dry_run = result.dry_run
    result.cutoffs = compute_cutoffs(session, sweep, now)
    bound.debug("sweep_started", cutoffs=_iso(result.cutoffs), dry_run=dry_run)
    stmts = session.statements(sweep.predicate)
    params = dict(result.cutoffs)
    # The full-table interlock sees the table whole, partitions that could be dropped included:
    # dropping every partition empties a table as surely as deleting every row.
    measure = measure_eligible(session, stmts, params)
    threshold = sweep.max_eligible_fraction
    key = _table_key(session, sweep)
    if dry_run:
        _count(session, sweep, settings, result, progress, stmts, params, measure, threshold,
               ledger.window(key, measure.rows))
        if result.refusal is None:
            ledger.record(key, result.rows)
        return
    judge_table(session, sweep, stmts, params, measure, threshold,
                ledger.window(key, measure.rows))
    before = result.rows
    try:
        _delete(session, sweep, settings, result, progress, stmts, params, measure)
    finally:
        ledger.record(key, result.rows - before)


def _table_key(session: Session, sweep: Sweep) -> str:
    """The swept table's key in a :class:`DeletionLedger`: its oid ("big" and "public.big"
    are one table)."""
    return str(session.scalar("SELECT %(t)s::regclass::oid", {"t": regclass_text(sweep.table)}))


def _count(
    session: Session,
    sweep: Sweep,
    settings: Settings,
    result: SweepResult,
    progress: _Progress,
    stmts: SweepStatements,
    params: dict[str, Any],
    measure: EligibleMeasure,
    threshold: float,
    window: _TableWindow,
) -> None:
    """A dry run: the partitions a run would retire, the rows it would delete, and
    (``result.refusal``) whether the full-table interlock would stop it before its first
    delete, judged as a real run of the same invocation would be (:func:`judge_table`): the
    rows that the dry run's earlier sweeps counted in this table count as deleted
    (``window``, of the projected ledger). Exact when the sweeps of a table delete different
    rows; when they share rows, the refusal may be projected where a real run would go on
    (never the other way round)."""
    partitions.retire(session, sweep, settings, result, progress.metrics, progress.stop)
    result.rows = session.count_eligible(stmts, params)
    result.stopped_by = "done"
    try:
        judge_table(session, sweep, stmts, params, measure, threshold, window,
                    projected=True, eligible=result.rows)
    except errors.FullTableRefused as exc:
        result.refusal = str(exc)


def _delete(
    session: Session,
    sweep: Sweep,
    settings: Settings,
    result: SweepResult,
    progress: _Progress,
    stmts: SweepStatements,
    params: dict[str, Any],
    measure: EligibleMeasure,
) -> None:
    """Partitions retired, then the batches of every heap (results into ``result``)."""
    partitions.retire(session, sweep, settings, result, progress.metrics, progress.stop)
    if result.partitions:
        stmts = session.statements(sweep.predicate)  # the heaps that remain
    batch_size = sweep.batch_size
    sizer = BatchSizer(batch_size, settings.statement_timeout.total_seconds())
    strategies: list[str] = []
    result.stopped_by = "done"
    for hs in stmts.heaps:
        strategy, fraction = choose_strategy(
            session, stmts, hs, params, settings, sweep.strategy, batch_size,
            sample=measure.samples.get(hs.heap.qualified),
        )
        if strategy not in strategies:
            strategies.append(strategy)
        result.strategy = "+".join(strategies)
        deleter = _Deleter(session, stmts, hs, params, sizer, progress)
        result.stopped_by = batch_strategy(strategy, settings, fraction).run(deleter)
        if result.stopped_by != "done":
            break
    if not stmts.heaps:
        result.strategy = sweep.strategy


def refuse_unsweepable(session: Session, sweeps: Iterable[Sweep]) -> None:
    """Check, before any sweep runs, that every sweep's table is one reaper can delete from
    (an ordinary table, or a partitioned or inheritance parent whose every member is one), and
    that a declared sweep reads only tables and columns of built-in types (composing its
    statements, :meth:`reaper.db.Session.statements`).

    A table that does not exist is left to the run (which fails and says so).

    Raises:
        RelationRefused: the first sweep whose table is a view, a foreign table, a
            materialized view ... or covers one, or whose declaration reads a view or a
            column of a user type; the message names the table and why.
        DatabaseError: the catalog could not be read.
    """
    for sweep in sweeps:
        try:
            session.statements(sweep.predicate)
        except errors.ObjectMissing:
            continue
        except errors.RelationRefused as exc:
            raise errors.RelationRefused(f"sweep {sweep.name}: {exc}") from None


def run_sweeps(
    db: Database,
    sweeps: Iterable[Sweep],
    settings: Settings,
    **kwargs: Any,
) -> list[SweepResult]:
    """Run ``sweeps`` one after the other (already in dependency order); one failing never
    stops the next. Keyword arguments go to :func:`run_sweep`."""
    return [run_sweep(db, s, settings, **kwargs) for s in sweeps]


def _iso(cutoffs: Mapping[str, datetime]) -> dict[str, str]:
    return {k: v.isoformat() for k, v in cutoffs.items()}

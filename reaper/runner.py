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
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from reaper import errors, partitions
from reaper.db import (
    MIN_HEAP_WALK_VERSION,
    Database,
    Session,
    SweepStatements,
    advisory_lock_key,
)
from reaper.metrics import Metrics
from reaper.settings import Settings
from reaper.sweeps import Sweep, retention_of

log = structlog.get_logger("reaper.runner")

SUCCESS, FAILURE, SKIPPED = "success", "failure", "skipped"
OUTCOMES = (SUCCESS, FAILURE, SKIPPED)

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
# After an optimistic heap-walk batch met a row a writer held, this many ranges are taken with
# row locks before trying without again: writers are busy there, and a failed optimistic batch
# is wasted work.
LOCKED_RANGES_AFTER_CONTENTION = 16
# auto walks the heap when the index path would take more than this many batches, whatever
# the fraction: bench --crossover (2,000,000 requests, 5,000 rows per batch) had the index at
# 0.90-1.02x the walk's time for 4-8 batches and 1.28x for 20, as each batch re-reads the dead
# index entries of the batches before it.
MAX_INDEX_BATCHES = 10
# A batch that a foreign key blocked (a request inserted for a token being deleted) is tried
# this many times in all; the predicate sees the new reference on the retry.
FK_CONFLICT_ATTEMPTS = 3


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
        batch_seconds: duration of each batch transaction, in order.
        contended_batches: optimistic heap-walk batches that met a row a writer held (or ran
            past their time limit) and were redone with row locks.
        lock_holders: for a skipped run, the pids of the sessions that held its locks.
        partitions: partitions removed whole before the batches (reaper.partitions), each
            ``{partition, action, rows, rows_source}``; with ``dry_run``, those it would
            remove, each ``{partition, action, estimated_rows}``.
        locked_at, unlocked_at: Unix times between which the run held its advisory locks
            and did its work (None when it never got them).
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
    dry_run: bool = False
    batch_seconds: list[float] = field(default_factory=list)
    contended_batches: int = 0
    lock_holders: list[int] = field(default_factory=list)
    locked_at: float | None = None
    unlocked_at: float | None = None
    partitions: list[dict[str, Any]] = field(default_factory=list)

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
            "partitions": self.partitions,
        }


@dataclass(frozen=True)
class Budget:
    """When a run stops with work left: after ``max_rows`` rows or ``max_seconds`` seconds.

    The batch in flight always finishes; None means no limit.
    """

    max_rows: int | None = None
    max_seconds: float | None = None

    @classmethod
    def from_settings(cls, settings: Settings, sweep: str | None = None) -> Budget:
        """The per-run budget of ``--max-rows-per-run`` / ``--max-seconds-per-run``, or of
        sweep ``sweep``'s own ``[sweeps.NAME]`` budget where it sets one."""
        if sweep is None:
            rows, secs = settings.max_rows_per_run, settings.max_seconds_per_run
        else:
            rows = settings.max_rows_per_run_for(sweep)
            secs = settings.max_seconds_per_run_for(sweep)
        return cls(rows, secs.total_seconds() if secs else None)


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

    def should_stop(self) -> str | None:
        """The reason to stop before the next batch, or None to go on."""
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


def compute_cutoffs(
    session: Session, sweep: Sweep, settings: Settings, now: datetime | None
) -> dict[str, datetime]:
    """Each of the sweep's cutoffs: ``now - retention``, from one reading of the database
    clock (so that all cutoffs of a run agree), retentions as exact durations.

    Raises:
        ConfigError: the sweep names a retention setting that does not exist.
    """
    db_now = session.now(now)
    return {param: db_now - retention_of(sweep, param, settings) for param in sweep.cutoffs}


def choose_strategy(
    session: Session,
    stmts: SweepStatements,
    params: Mapping[str, Any],
    settings: Settings,
    strategy: str | None = None,
    batch_size: int | None = None,
) -> tuple[str, float | None]:
    """``(strategy, fraction)``: ``heap`` or ``index``, and the fraction of the table that is
    garbage, measured on a sample of about SAMPLE_BLOCKS heap blocks (None before
    PostgreSQL 14, which has no TID range scan and always uses the index).

    The heap walk reads every block once, so it wins when garbage is at least
    ``heap_walk_threshold`` of the table; the index wins when garbage is scattered (bench/
    ``--crossover`` measures where). The fraction is measured, not asked of the planner: the
    planner's estimate of a predicate with a subquery parameter can be off a hundredfold
    (bench B3: 1,376,411 estimated, 10,000 real), and a block sample costs a few milliseconds.
    The index path also gives way when the sample projects more than MAX_INDEX_BATCHES
    batches of ``batch_size`` rows (default ``settings.batch_size``): each index batch re-reads
    the dead index entries of the batches before it. Servers before PostgreSQL 14 have no TID
    range scan and always use the index. ``strategy`` (a sweep's own, from its
    ``[sweeps.NAME]`` table) overrides ``settings.strategy``.
    """
    wanted = strategy or settings.strategy
    if session.server_version < MIN_HEAP_WALK_VERSION or wanted == "index":
        # A forced index path needs no sample: the fraction only sizes the walk's first range.
        return "index", None
    stats = stmts.stats or session.table_stats(stmts.table)
    if stats.partitioned:
        # A partitioned table's own heap is empty: a walk over it would find nothing and
        # report success. The index path reaches every partition.
        return "index", None
    if stats.blocks <= FIRST_BLOCKS_UNKNOWN and wanted == "auto":
        # A table smaller than one first heap range: the walk saves nothing, and the index
        # path keeps each batch to batch_size rows exactly.
        return "index", None
    if stats.blocks == 0:
        return wanted, 0.0
    percent = min(100.0, 100.0 * SAMPLE_BLOCKS / stats.blocks)
    eligible, sampled = session.sample_eligible(stmts, params, percent)
    fraction = eligible / sampled if sampled else 0.0
    if wanted != "auto":
        return wanted, fraction
    projected_batches = eligible * 100.0 / percent / (batch_size or settings.batch_size)
    if fraction >= settings.heap_walk_threshold or projected_batches > MAX_INDEX_BATCHES:
        return "heap", fraction
    return "index", fraction


def _retry_fk(delete: Callable[[], int], sweep: str) -> int | None:
    """Run ``delete``, retrying on a foreign-key conflict; None when it kept conflicting."""
    for attempt in range(1, FK_CONFLICT_ATTEMPTS + 1):
        try:
            return delete()
        except errors.ForeignKeyConflict as exc:
            log.warning("batch_conflict", sweep=sweep, attempt=attempt, error=str(exc))
    return None


def _walk_heap(
    session: Session,
    stmts: SweepStatements,
    params: Mapping[str, Any],
    batch_size: int,
    target_seconds: float,
    progress: _Progress,
    estimated_fraction: float | None = None,
    optimistic: bool = True,
) -> str:
    """Delete the garbage block range by block range, front to back; returns stopped_by.

    Each range is sized to hold about ``batch_size`` garbage rows and to take about
    ``target_seconds``, from the catalog's rows per block, then from what each batch found.

    With ``optimistic``, a range is first deleted without row locks (half the writes: bench
    B1); where a writer holds one of its rows, that batch fails within 1 ms, rolls back, and
    the range is redone with ``FOR UPDATE SKIP LOCKED``, as are the next
    :data:`LOCKED_RANGES_AFTER_CONTENTION` ranges (writers are busy there).
    """
    locked_left = 0

    def delete_range(lo: int, hi: int) -> int:
        nonlocal locked_left
        if optimistic and locked_left == 0:
            try:
                return session.delete_heap_range(stmts, params, lo, hi, optimistic=True)
            except errors.StatementTimeout as exc:
                if progress.stop is not None and progress.stop.is_set():
                    raise
                progress.result.contended_batches += 1
                locked_left = LOCKED_RANGES_AFTER_CONTENTION
                log.debug(
                    "batch_contended", sweep=progress.result.sweep, first_block=lo,
                    end_block=hi, error=str(exc),
                )
        locked_left = max(locked_left - 1, 0)
        return session.delete_heap_range(stmts, params, lo, hi)

    stats = stmts.stats or session.table_stats(stmts.table)
    end = stats.blocks
    if stats.rows_per_block > 0:
        fraction = estimated_fraction if estimated_fraction else 1.0
        garbage_per_block = max(stats.rows_per_block * fraction, 1e-3)
        span = math.ceil(batch_size / garbage_per_block)
    else:
        span = FIRST_BLOCKS_UNKNOWN
    span = min(max(span, MIN_BLOCKS_PER_BATCH), FIRST_MAX_BLOCKS)
    first = 0
    while first < end:
        stopped = progress.should_stop()
        if stopped:
            return stopped
        last = min(first + span, end)
        t0 = time.monotonic()
        rows = _retry_fk(
            functools.partial(delete_range, first, last),
            progress.result.sweep,
        )
        seconds = time.monotonic() - t0
        progress.batch(rows or 0, seconds)
        first = last
        # Resize the next range: toward batch_size rows and target_seconds, at most 2x either way
        # per step so one odd range (a run of live rows, a checkpoint) cannot swing it wildly.
        scale = batch_size / rows if rows else 2.0
        if seconds > 0:
            scale = min(scale, target_seconds / seconds)
        span = int(span * min(max(scale, 0.5), 2.0))
        span = min(max(span, MIN_BLOCKS_PER_BATCH), MAX_BLOCKS_PER_BATCH)
    return "done"


def _follow_index(
    session: Session,
    stmts: SweepStatements,
    params: Mapping[str, Any],
    batch_size: int,
    progress: _Progress,
) -> str:
    """Delete up to ``batch_size`` rows per batch through the predicate's index until a batch
    comes back short (nothing left but rows that writers hold); returns stopped_by."""
    while True:
        stopped = progress.should_stop()
        if stopped:
            return stopped
        t0 = time.monotonic()
        rows = _retry_fk(
            lambda: session.delete_index_batch(stmts, params, batch_size), progress.result.sweep
        )
        progress.batch(rows or 0, time.monotonic() - t0)
        if rows is None or rows < batch_size:
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
        budget or Budget.from_settings(settings, sweep.name),
        stop,
        on_batch,
    )
    bound = log.bind(sweep=sweep.name, table=sweep.table, reason=sweep.reason)
    started = time.monotonic()
    keys = lock_keys(sweep) if lock and not dry_run else []
    try:
        with db.session() as session:
            if keys and not session.try_advisory_locks(keys):
                result.outcome = SKIPPED
                result.lock_holders = [h.pid for h in session.advisory_lock_holders(keys)]
            else:
                result.locked_at = time.time()
                try:
                    _sweep_batches(session, sweep, settings, result, progress, now, bound)
                finally:
                    result.unlocked_at = time.time()
                    if keys:
                        session.release_advisory_locks()
    except Exception as exc:
        result.outcome = FAILURE
        result.error = str(exc) if isinstance(exc, errors.ReaperError) else repr(exc)
        result.error_type = type(exc).__name__
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
        dry_run=dry_run,
    )
    if result.outcome == FAILURE:
        bound.error("sweep_failed", error=result.error, error_type=result.error_type, **fields)
    elif result.outcome == SKIPPED:
        # Another process (a replica, a run-once by hand) runs this sweep or one it depends
        # on: not an error, the next scheduled run tries again.
        bound.info("sweep_skipped", lock_holders=result.lock_holders, seconds=fields["seconds"])
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
) -> None:
    """The body of a run, on one session: cutoffs, strategy, batches (results into ``result``)."""
    dry_run = result.dry_run
    result.cutoffs = compute_cutoffs(session, sweep, settings, now)
    bound.debug("sweep_started", cutoffs=_iso(result.cutoffs), dry_run=dry_run)
    partitions.retire(session, sweep, settings, result, progress.metrics, progress.stop)
    stmts = session.statements(sweep.table, sweep.predicate)
    params = dict(result.cutoffs)
    if dry_run:
        result.rows = session.count_eligible(stmts, params)
        result.stopped_by = "done"
        return
    batch_size = settings.batch_size_for(sweep.name)
    result.strategy, fraction = choose_strategy(
        session, stmts, params, settings, settings.strategy_for(sweep.name), batch_size
    )
    if result.strategy == "heap":
        result.stopped_by = _walk_heap(
            session, stmts, params, batch_size,
            settings.batch_target_seconds.total_seconds(), progress, fraction,
            optimistic=settings.optimistic_batches,
        )
    else:
        result.stopped_by = _follow_index(session, stmts, params, batch_size, progress)


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

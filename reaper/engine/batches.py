"""The batches of one heap: the deleter that splits a failing batch and skips the row that
fails alone, and the two ways of finding a batch's victims (the heap walk, the index path).

Never repeats a failing batch unchanged: each retry is a half of it, or leaves out the row
that failed alone; a row found undeletable is left out of the process's later runs too
(docs/engine.md, "Rows that cannot be deleted"). Never repeats a batch that removed nothing:
the run stops (docs/engine.md, "A run ends").
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from reaper import errors
from reaper.config.engine import EngineOptions
from reaper.db import KEYSET_START, BatchRows, DeleteObstacle, HeapStatements
from reaper.engine.context import Run
from reaper.engine.failures import (
    LOCK_NOT_AVAILABLE,
    held_row,
    isolable,
    run_failure,
    skip_reason,
)
from reaper.engine.port import BatchSession
from reaper.engine.sizing import BatchSizer, Splitter
from reaper.engine.stalls import StallGuard
from reaper.engine.strategy import FIRST_BLOCKS_UNKNOWN
from reaper.vocab import ObstacleKind, SkipReason, StopReason, Strategy

log = structlog.get_logger("reaper.runner")

# Heap ranges stay within these bounds whatever the estimates say: one block still makes
# progress; 16,384 blocks (128 MiB at 8 KiB) is about a second of scan.
MIN_BLOCKS_PER_BATCH = 1
MAX_BLOCKS_PER_BATCH = 16_384
# The first range is at most this many blocks (~20 ms of scan), whatever the garbage
# fraction: a sparse table's first range would be slow (docs/performance.md).
FIRST_MAX_BLOCKS = 1024
# Ranges aim at this fraction of a batch's limit: a range over the limit is deleted, rolled
# back and redone, so aiming at the limit itself overshoots often (docs/performance.md).
RANGE_FILL = 0.8
# While the database is busy, a batch's limit follows busy_batch_seconds, but never below
# this many rows: fewer would cost more in round trips than they delete.
MIN_BUSY_ROWS = 100
# A heap walk's batch spends at most about this share of its time on what every batch costs
# whatever its rows (round trips, statement-level triggers, a slow link): where that fixed
# part alone exceeds the batch time target, ranges aim at that part divided by FIXED_SHARE.
FIXED_SHARE = 0.25
# The fixed part is measured this many times before a walk (the least counts: the first may
# pay for a plan or a cold cache).
FIXED_PROBES = 2


class Deleter:
    """One heap's batches: row limits from the sizer, a failing batch split in halves until
    the row that fails is alone, that row skipped (its tuple id left out of every later
    batch of the run, and of the process's later runs while it stands unchanged:
    :mod:`reaper.engine.undeletable`). Never repeats a failing batch unchanged: each retry is
    a half of it, or leaves out the row that failed alone. Stops the run when its batches
    remove none, or again and again far fewer, of the rows they name
    (:class:`reaper.engine.stalls.StallGuard`), naming the cause when the catalog can.

    Args:
        run: the run whose batches these are.
        hs: the heap's statements.
        sizer: the batch size as the batches' durations adapt it (shared by a run's heaps).
        session: the session the batches run on (None: the run's own; a helper of a
            parallel heap walk has its own: :meth:`helper`).
    """

    def __init__(
        self, run: Run, hs: HeapStatements, sizer: BatchSizer, session: BatchSession | None = None
    ) -> None:
        self.run, self.hs, self.sizer = run, hs, sizer
        self.session = session or run.session
        self.splitter = Splitter()
        self.guard = StallGuard()
        # The row limit while the database is busy (None: not busy, or not measured yet).
        self.busy_limit: int | None = None
        self.skip: list[tuple[int, int]] = self._known_undeletable()
        # Why the last attempt failed, None after a success.
        self.last_failure: SkipReason | None = None
        # What the catalog says can keep this heap's deletes from removing their rows (None:
        # not asked yet; asked once, when a choice or a stalled batch needs it).
        self._obstacles: list[DeleteObstacle] | None = None

    def _known_undeletable(self) -> list[tuple[int, int]]:
        """The rows of this heap that an earlier run of the process found undeletable and
        that still stand unchanged: left out of every batch of this run, unattempted."""
        run, oid = self.run, self.hs.heap.oid
        if run.undeletable is None:
            return []
        known = run.undeletable.recall(oid, run.clock())
        if not known:
            return []
        versions = self.session.row_versions(run.statements, self.hs, sorted(known))
        kept = run.undeletable.still_undeletable(oid, versions, run.clock())
        run.result.known_undeletable += len(kept)
        return sorted(kept)

    def helper(self, session: BatchSession) -> Deleter:
        """A deleter of the same heap on ``session``, for a helper of a parallel heap walk:
        the rows this one leaves out and what the catalog says of the heap are its too (read
        already); the sizer is shared, so that a batch past statement_timeout on any worker
        makes every worker's batches smaller; its splitter and stall guard are its own, as
        its batches are."""
        other = Deleter.__new__(Deleter)
        other.run, other.hs, other.session = self.run, self.hs, session
        other.sizer = self.sizer
        other.splitter, other.guard = Splitter(), StallGuard()
        other.busy_limit, other.last_failure = self.busy_limit, None
        other.skip = list(self.skip)
        other._obstacles = self.obstacles()
        return other

    def fixed_seconds(self) -> float:
        """What one heap-walk batch of this heap costs whatever its rows, in seconds: the
        least of FIXED_PROBES batches over no block (:meth:`reaper.db.Session.empty_batch`);
        0 when such a batch fails (the walk's own batches then meet the failure)."""
        run = self.run
        least = math.inf
        for _ in range(FIXED_PROBES):
            t0 = run.clock()
            try:
                self.session.empty_batch(run.statements, self.hs, run.params)
            except errors.DatabaseError:
                return 0.0
            least = min(least, run.clock() - t0)
        return max(least, 0.0)

    def obstacles(self) -> list[DeleteObstacle]:
        """What the catalog says can keep this heap's deletes from removing the rows they
        name (read once per run of the heap)."""
        if self._obstacles is None:
            self._obstacles = self.session.delete_obstacles(self.hs)
        return self._obstacles

    def limit(self) -> int:
        """The next batch's row limit: the sizer's (or the splitter's while a batch fails),
        and while the database is busy (:meth:`Run.busy_seconds`) at most the busy limit,
        which follows the batches' durations toward that target (:meth:`_measured`)."""
        limit = self.splitter.next_limit(self.sizer.size)
        if self.run.busy_seconds() is None:
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
        return (
            self.sizer.size >= self.sizer.ceiling
            and self.splitter.limit is None
            and self.ranges_tell()
        )

    def ranges_tell(self) -> bool:
        """Whether a range deleted in place (heap_range_batch.sql) says what it removed against
        what it named. It returns only the rows it removed: where the catalog names something
        that may keep a row a DELETE names (a BEFORE DELETE row trigger, row-level security),
        a range is never deleted in place, so that every batch knows both numbers
        (:class:`reaper.engine.stalls.StallGuard`)."""
        return not self.obstacles()

    def _measured(self, limit: int, seconds: float) -> None:
        """While busy, the next limit: this batch's ``limit`` scaled toward the busy target
        by its ``seconds`` (at most 2x either way per batch, so that one slow batch cannot
        swing it; the fixed cost of a batch, its round trips, is part of what is measured,
        so a target below it settles at MIN_BUSY_ROWS)."""
        busy = self.run.busy_seconds()
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
        t0 = self.run.clock()
        self.last_failure = None
        if limit <= 1:
            return self._one_row(first_victim, t0)
        try:
            rows = batch()
        except errors.DatabaseError as exc:
            self._failed(exc, limit)
            return None
        seconds = self.run.clock() - t0
        self.splitter.succeeded(limit, rows.selected)
        self.sizer.succeeded(seconds)
        self._measured(limit, seconds)
        self.run.batch(rows.deleted, seconds)
        self._progressed(rows.selected, rows.deleted)
        self.run.deleted_keys(self.hs.heap.table, self.hs.trail.keys, rows)
        return rows

    def _progressed(self, selected: int, deleted: int) -> None:
        """Stop the run (raise) when the batches stopped removing the rows they name."""
        if not self.guard.observe(selected, deleted):
            return
        obstacles = self.obstacles()
        if self.guard.stalled(bool(obstacles)):
            raise errors.BatchStalled(self._stalled(selected, deleted, obstacles))

    def _stalled(self, selected: int, deleted: int, obstacles: list[DeleteObstacle]) -> str:
        """The run's one line when its batches stopped removing rows: what the last batch
        did, the cause the catalog names (or that it names none), and the fix."""
        heap = self.hs.heap.table
        what = (
            f"a batch of {heap} named {selected:,} rows and removed "
            f"{'none' if deleted == 0 else f'{deleted:,}'}"
        )
        if self.guard.short > 1:
            what += f" ({self.guard.short} such batches in a row)"
        if not obstacles:
            return (
                f"{what}, and the catalog names no cause (no BEFORE DELETE row trigger, "
                "rule ON DELETE or row-level security policy keeps them); the run stopped "
                "rather than repeat it: find what keeps the rows (a trigger of another "
                "table, a concurrent writer)"
            )
        causes = "; ".join(o.detail for o in obstacles)
        fixes = []
        kinds = {o.kind for o in obstacles}
        if ObstacleKind.TRIGGER in kinds:
            fixes.append(
                "a trigger that returns NULL keeps its row (a soft delete): let it "
                "return OLD for the rows reaper deletes, or do not sweep this table"
            )
        if ObstacleKind.RULE in kinds:
            fixes.append("drop the rule ON DELETE")
        if ObstacleKind.POLICY in kinds:
            fixes.append(
                "ALTER ROLE ... BYPASSRLS for reaper's role, or give it a DELETE "
                "policy that reaches every row its SELECT policies show"
            )
        return f"{what}: {causes}; the run stopped rather than repeat it: {'; '.join(fixes)}"

    def _fail_run(self, exc: errors.DatabaseError) -> None:
        """Raise ``exc`` as the run's failure when it is not a row's fault, or when a stop
        was asked for (no more splitting then)."""
        if isolable(exc) and not self.run.stopping():
            return
        failure = run_failure(exc)
        if failure is exc:
            raise exc
        raise failure from exc

    def _failed(self, exc: errors.DatabaseError, limit: int) -> None:
        self._fail_run(exc)
        r = self.run.result
        reason = skip_reason(exc)
        self.last_failure = reason
        if reason == SkipReason.TIMEOUT:
            self.run.tally("timed_out_batches")
            self.sizer.timed_out()
        elif reason == SkipReason.LOCKED:
            self.run.tally("contended_batches")
        held = held_row(exc, self.hs.heap.name)
        if held is not None and held not in self.skip:
            # The server named the row a writer holds: leave it out, and retry the batch
            # without it (not split: the other rows are not in the way).
            self.skip.append(held)
            self.run.skipped(self.hs.heap.table, held, exc)
            return
        self.splitter.failed(limit)
        log.debug(
            "batch_split",
            sweep=r.sweep,
            heap=self.hs.heap.table,
            rows=limit,
            reason=reason,
            sqlstate=exc.sqlstate,
            error=str(exc),
        )

    def _one_row(self, first_victim: Callable[[], Any], t0: float) -> BatchRows | None:
        tid = first_victim()
        if tid is None:
            self.splitter.succeeded()
            return BatchRows(0, 0, None)
        run = self.run
        try:
            rows = self.session.delete_row(
                run.statements, self.hs, run.params, tid, before_commit=run.before_commit
            )
        except errors.DatabaseError as exc:
            self._fail_run(exc)
            reason = skip_reason(exc)
            if reason == SkipReason.TIMEOUT:
                run.tally("timed_out_batches")
            self.skip.append(tid)
            run.skipped(self.hs.heap.table, tid, exc)
            if reason != SkipReason.LOCKED:
                self._remember(tid, reason)
            self.splitter.succeeded(1)
            return BatchRows(0, 1, tid)
        seconds = run.clock() - t0
        self.splitter.succeeded(1)
        self.sizer.succeeded(seconds)
        run.batch(rows.deleted, seconds)
        run.deleted_keys(self.hs.heap.table, self.hs.trail.keys, rows)
        self._progressed(1, rows.deleted)
        return rows

    def _remember(self, tid: tuple[int, int], reason: SkipReason) -> None:
        """Keep the row at ``tid``, whose delete failed alone, as undeletable for the
        process's later runs, in the version it has now (a row a writer held is busy, not
        undeletable: never remembered)."""
        run = self.run
        if run.undeletable is None:
            return
        xmin = self.session.row_versions(run.statements, self.hs, [tid]).get(tid)
        if xmin is not None:
            run.undeletable.remember(self.hs.heap.oid, tid, xmin, reason, run.clock())


class BatchStrategy(Protocol):
    """How one heap's batches find their victims: :class:`HeapWalk` or :class:`IndexBatches`
    (:func:`reaper.engine.strategy.choose_strategy` picks one per heap)."""

    def run(self, deleter: Deleter) -> StopReason:
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

    def run(self, deleter: Deleter) -> StopReason:
        return walk_heap(deleter, self.target_seconds, self.estimated_fraction)


@dataclass(frozen=True)
class IndexBatches:
    """The index path (:attr:`Strategy.INDEX`): batches through the predicate's index."""

    def run(self, deleter: Deleter) -> StopReason:
        return follow_index(deleter)


def batch_strategy(name: Strategy, options: EngineOptions, fraction: float | None) -> BatchStrategy:
    """The :class:`BatchStrategy` named ``name`` (``heap`` or ``index``)."""
    if name == Strategy.HEAP:
        return HeapWalk(options.batch_target_seconds, fraction)
    return IndexBatches()


def first_span(deleter: Deleter, estimated_fraction: float | None) -> int:
    """The first range of a heap walk, in blocks: about RANGE_FILL of the sizer's limit of
    garbage rows, from the catalog's rows per block and the sample's garbage fraction."""
    stats = deleter.hs.heap.stats
    size = deleter.sizer.size * RANGE_FILL
    if stats.rows_per_block > 0:
        fraction = estimated_fraction if estimated_fraction else 1.0
        garbage_per_block = max(stats.rows_per_block * fraction, 1e-3)
        span = math.ceil(size / garbage_per_block)
    else:
        span = FIRST_BLOCKS_UNKNOWN
    return min(max(span, MIN_BLOCKS_PER_BATCH), FIRST_MAX_BLOCKS)


def next_span(
    span: int,
    limit: int,
    want: float,
    selected: int,
    covered: int,
    seconds: float,
    target: float,
    fixed: float = 0.0,
) -> int:
    """The next range of a heap walk, in blocks, after a batch of ``limit`` rows that
    selected ``selected`` garbage rows over ``covered`` blocks of its ``span`` in ``seconds``:
    toward ``want`` rows (RANGE_FILL of the next limit) and ``target`` seconds.

    A batch's seconds are a ``fixed`` part, which every batch pays whatever its rows
    (:meth:`Deleter.fixed_seconds`), and a part that grows with its blocks and rows; only
    the second scales with the range. So the range is scaled by the time left after the
    fixed part, and where the fixed part alone is more than FIXED_SHARE of ``target`` the
    batch aims at ``fixed / FIXED_SHARE`` instead: a fixed cost makes ranges larger, never
    smaller, and a walk crosses the live part of a table in a few statements.

    At most 2x either way per step, so one odd range (a run of live rows, a checkpoint)
    cannot swing it wildly; a range without garbage grows when it was quick and never
    shrinks. A capped batch (``selected >= limit``) knows the density from where it stopped:
    the next range is sized by it at once (no damping: a range far too large for the garbage
    in it would be deleted and rolled back again, heap_range_batch.sql)."""
    goal = max(target, fixed / FIXED_SHARE)
    if selected >= limit:
        return min(
            max(math.ceil(want * covered / selected), MIN_BLOCKS_PER_BATCH), MAX_BLOCKS_PER_BATCH
        )
    if selected:
        scale = want * covered / selected / max(span, 1)
        if seconds > fixed:
            scale = min(scale, (goal - fixed) / (seconds - fixed))
    else:
        scale = 2.0 if seconds < goal else 1.0
    span = int(span * min(max(scale, 0.5), 2.0))
    return min(max(span, MIN_BLOCKS_PER_BATCH), MAX_BLOCKS_PER_BATCH)


def walk_heap(
    deleter: Deleter,
    target_seconds: float,
    estimated_fraction: float | None = None,
) -> StopReason:
    """Delete one heap's garbage block range by block range, front to back; returns
    stopped_by.

    A batch deletes at most the sizer's limit of rows: when a range holds more garbage, the
    next batch starts right after the last row selected. A range is sized to hold about that
    many garbage rows and to take about ``target_seconds``, from the catalog's rows per block,
    then from what each batch found (:func:`next_span`).

    With ``--parallel`` above 1 and more than one range to walk, the ranges are handed out
    to the run's own session and up to ``parallel - 1`` helpers, each on its own connection
    (:class:`_ParallelWalk`), unless the catalog names something that may keep a delete
    from removing the rows it names (:meth:`Deleter.ranges_tell`): such a heap is walked on
    one connection.
    """
    run, hs = deleter.run, deleter.hs
    end = hs.heap.stats.blocks
    span = first_span(deleter, estimated_fraction)
    fixed = deleter.fixed_seconds() if end > 0 else 0.0
    if run.parallel > 1 and run.helper_session is not None and end > span and deleter.ranges_tell():
        return _ParallelWalk(deleter, end, span, fixed, target_seconds).walk()
    session, stmts, params = deleter.session, run.statements, run.params
    pos = (0, 0)
    while pos[0] < end:
        stopped = run.should_stop()
        if stopped:
            return stopped
        last_block = min(pos[0] + span, end)
        limit = deleter.limit()
        target = run.busy_seconds() or target_seconds
        t0 = run.clock()
        start = pos
        rows = deleter.attempt(
            limit,
            functools.partial(
                session.delete_heap_batch,
                stmts,
                hs,
                params,
                start,
                last_block,
                limit,
                list(deleter.skip),
                deleter.trusts_ranges(),
                before_commit=run.before_commit,
            ),
            functools.partial(
                session.first_victim, stmts, hs, params, list(deleter.skip), start, last_block
            ),
        )
        seconds = run.clock() - t0
        if rows is None:
            if deleter.last_failure == SkipReason.TIMEOUT:
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
        if deleter.splitter.limit is not None:
            # Splitting a failing batch: its next part is the next victims from here, so the
            # range keeps its size (a range sized to a part would leave the part's victims
            # out of it).
            continue
        span = next_span(
            span,
            limit,
            deleter.limit() * RANGE_FILL,
            rows.selected,
            covered,
            seconds,
            target,
            fixed,
        )
    return StopReason.DONE


# A parallel heap walk's own thread looks at its helpers this often (seconds) once every range
# is handed out, pacing them (Run.should_stop) until they finish; a helper that may not
# delete (the database is busy) looks again this often.
PARALLEL_POLL_SECONDS = 0.02


def _table_lock_wait(exc: errors.DatabaseError) -> bool:
    """Whether ``exc`` is a wait past the batch's lock timeout for a lock that no row is to
    blame for (:func:`reaper.engine.failures.isolable`): in a parallel walk, perhaps a lock
    another worker's statement held."""
    cause = exc.__cause__ if isinstance(exc.__cause__, errors.DatabaseError) else exc
    return cause.sqlstate == LOCK_NOT_AVAILABLE and not isolable(cause)


class _Ranges:
    """A parallel heap walk's block ranges, handed out front to back, each to one worker;
    a range a worker gives up on (the database got busy, a timeout) comes back, from the
    worker's position in it, and is handed out again first."""

    def __init__(self, end: int, span: int) -> None:
        self.end, self.span, self._next = end, span, 0
        self._back: list[tuple[tuple[int, int], int]] = []
        # Ranges handed out and not yet finished or given back.
        self.held = 0
        self._lock = threading.Lock()

    def take(self) -> tuple[tuple[int, int], int] | None:
        """``(first tuple id, end block)`` of the next range, or None: none left now."""
        with self._lock:
            if self._back:
                self.held += 1
                return self._back.pop()
            if self._next >= self.end:
                return None
            first, self._next = self._next, min(self._next + self.span, self.end)
            self.held += 1
            return (first, 0), self._next

    def split(self, middle: tuple[int, int], end_block: int) -> None:
        """A range held timed out: its part from ``middle`` is handed out again, and the
        ranges handed out from now on are half as large."""
        with self._lock:
            self._back.append((middle, end_block))
            self.span = max(MIN_BLOCKS_PER_BATCH, self.span // 2)

    def finished(self) -> None:
        with self._lock:
            self.held -= 1

    def give_back(self, pos: tuple[int, int], end_block: int) -> None:
        """The rest of a range, from ``pos``, to be handed out again."""
        with self._lock:
            self.held -= 1
            if pos[0] < end_block:
                self._back.append((pos, end_block))

    def idle(self) -> bool:
        """Every range walked: none left, none held."""
        with self._lock:
            return self.held == 0 and not self._back and self._next >= self.end


class _ParallelWalk:
    """One heap's walk on the run's session and up to ``parallel - 1`` helpers, each a thread
    on its own pooled connection (:meth:`reaper.db.Database.helper_session`), over disjoint
    block ranges (:class:`_Ranges`). Each range is deleted by the same short batches as the
    walk on one connection, by a deleter of its own (:meth:`Deleter.helper`).

    The run's own thread leads: before each of its batches it asks :meth:`Run.should_stop`
    (the pacer, the budget, the durable count), and lets the helpers delete only once one of
    its own batches removed the rows it named (a stalled heap stops at its first batch, as
    on one connection), and only while the database is idle (:meth:`Run.idle`): otherwise
    they give their ranges back and wait, and the walk goes on as on one connection. Helpers
    check the stop and the budget before each batch. With ``max_rows_per_run``, every batch
    is limited to the rows the budget has left beside the other workers' batches in flight,
    so that the workers together never delete more than the budget (one connection may pass
    it by its last batch). The first failure of any worker ends the walk: the others stop
    before their next batch, and it is raised on the run's thread, as one batch's failure
    is.
    """

    def __init__(
        self, deleter: Deleter, end: int, span: int, fixed: float, target_seconds: float
    ) -> None:
        self.deleter, self.run = deleter, deleter.run
        self.ranges = _Ranges(end, span)
        self.fixed, self.target_seconds = fixed, target_seconds
        self.halt = threading.Event()  # the walk ends: helpers stop before their next batch
        self.go = threading.Event()  # the database is idle: helpers may delete
        self.wake = threading.Event()  # a helper finished or gave back a range
        self.failure: BaseException | None = None
        # A batch of the run's own removed the rows it named: helpers may join.
        self.proven = False
        # Helpers were let delete (at least once); the walk went on alone (_go_alone).
        self.helped = self.alone = False
        # The run's own batch was tried again alone after a lock wait (at most once).
        self.retried = False
        self.helpers: list[threading.Thread] = []
        self._reserved = 0  # rows the workers' batches in flight may delete
        self._lock = threading.Lock()

    def walk(self) -> StopReason:
        # What the helpers share is read on the run's session first: what the catalog says
        # of the heap (every heap-walk batch asks it).
        self.deleter.obstacles()
        self.helpers = [
            threading.Thread(target=self._help, name=f"reaper-walk-{i}", daemon=True)
            for i in range(1, self.run.parallel)
        ]
        for t in self.helpers:
            t.start()
        try:
            return self._lead()
        finally:
            self.halt.set()
            self.go.set()
            for t in self.helpers:
                t.join()
            if self.failure is not None:
                raise self.failure

    def _lead(self) -> StopReason:
        run, deleter = self.run, self.deleter
        held: tuple[tuple[int, int], int] | None = None
        while True:
            if self.failure is not None:
                raise self.failure
            # Helpers start no batch while the pacer decides: a wait it makes for live
            # traffic, a standby or the WAL brake holds them too.
            self.go.clear()
            stopped = run.should_stop()
            if stopped:
                if held is not None:
                    self.ranges.give_back(*held)
                return stopped
            if self.proven and not self.alone and run.idle():
                self.go.set()
                self.helped = True
            else:
                self.go.clear()
            if held is None:
                held = self.ranges.take()
                if held is None:
                    if self.ranges.idle():
                        return StopReason.DONE
                    # Helpers are still deleting: pace them until they finish.
                    self.wake.wait(PARALLEL_POLL_SECONDS)
                    self.wake.clear()
                    continue
            limit = self._reserve(deleter.limit())
            if limit <= 0:
                # The row budget's rest is in the helpers' batches in flight: see what they
                # deleted.
                self.wake.wait(PARALLEL_POLL_SECONDS)
                self.wake.clear()
                continue
            before = run.result.rows
            try:
                held = self._batch(deleter, *held, limit)
            except errors.DatabaseError as exc:
                if not self.helped or self.retried or not _table_lock_wait(exc):
                    raise
                # Perhaps a helper's statement held the lock (a table's extension by an
                # archive table's or a trigger's inserts): the range is tried again, once,
                # alone.
                self._go_alone(exc)
                for t in self.helpers:
                    t.join()
                self.retried = True
                continue
            finally:
                self._release(limit)
            if deleter.guard.short == 0 and run.result.rows > before:
                self.proven = True

    def _help(self) -> None:
        try:
            with contextlib.ExitStack() as stack:
                assert self.run.helper_session is not None
                try:
                    session = stack.enter_context(self.run.helper_session())
                except errors.ReaperError as exc:
                    # Fewer connections, not a failed run: the run's own session goes on.
                    log.info(
                        "parallel_helper_unavailable", sweep=self.run.result.sweep, error=str(exc)
                    )
                    return
                self._work(self.deleter.helper(session))
        except BaseException as exc:  # raised on the run's thread (walk)
            with self._lock:
                if self.failure is None:
                    self.failure = exc
            self.halt.set()
        finally:
            self.wake.set()

    def _work(self, deleter: Deleter) -> None:
        held: tuple[tuple[int, int], int] | None = None
        while True:
            if self.halt.is_set() or self.alone or self.run.limits() is not None:
                break
            if not self.go.is_set():
                if held is not None:
                    self.ranges.give_back(*held)
                    self.wake.set()
                    held = None
                self.go.wait(PARALLEL_POLL_SECONDS)
                continue
            if held is None:
                held = self.ranges.take()
                if held is None:
                    return
            limit = self._reserve(deleter.limit())
            if limit <= 0:
                break
            try:
                held = self._batch(deleter, *held, limit)
            except errors.DatabaseError as exc:
                if not _table_lock_wait(exc):
                    raise
                # Perhaps another worker's statement held the lock: the range goes back to
                # the run's own session, which goes on alone.
                self._go_alone(exc)
                break
            finally:
                self._release(limit)
            if held is None:
                self.wake.set()
        if held is not None:
            self.ranges.give_back(*held)

    def _go_alone(self, exc: errors.DatabaseError) -> None:
        """The walk's workers waited for each other's locks: the run's own session goes on
        alone, as on one connection (logged once)."""
        with self._lock:
            if self.alone:
                return
            self.alone = True
        self.go.clear()
        self.wake.set()
        log.info(
            "parallel_walk_alone",
            sweep=self.run.result.sweep,
            heap=self.deleter.hs.heap.table,
            error=str(exc),
            sqlstate=exc.sqlstate,
        )

    def _reserve(self, limit: int) -> int:
        """A batch's ``limit``, within what the row budget has left beside the other
        workers' batches in flight (0: nothing left now)."""
        max_rows = self.run.budget.max_rows
        if max_rows is None:
            return limit
        with self._lock:
            limit = min(limit, max_rows - self.run.result.rows - self._reserved)
            if limit > 0:
                self._reserved += limit
            return limit

    def _release(self, limit: int) -> None:
        if self.run.budget.max_rows is not None:
            with self._lock:
                self._reserved -= limit

    def _batch(
        self, deleter: Deleter, pos: tuple[int, int], end_block: int, limit: int
    ) -> tuple[tuple[int, int], int] | None:
        """One batch of the range from ``pos`` to ``end_block``; returns what is left of the
        range (None: the range is finished, or given back)."""
        run, hs, session = self.run, deleter.hs, deleter.session
        span = end_block - pos[0]
        target = run.busy_seconds() or self.target_seconds
        t0 = run.clock()
        rows = deleter.attempt(
            limit,
            functools.partial(
                session.delete_heap_batch,
                run.statements,
                hs,
                run.params,
                pos,
                end_block,
                limit,
                list(deleter.skip),
                deleter.trusts_ranges(),
                before_commit=run.before_commit,
            ),
            functools.partial(
                session.first_victim,
                run.statements,
                hs,
                run.params,
                list(deleter.skip),
                pos,
                end_block,
            ),
        )
        seconds = run.clock() - t0
        if rows is None:
            if deleter.last_failure == SkipReason.TIMEOUT and span > MIN_BLOCKS_PER_BATCH:
                # Past statement_timeout: the range's scan may be what is slow, not the rows.
                # Its second half is handed out again; the first is tried alone.
                middle = pos[0] + span // 2
                self.ranges.split((middle, 0), end_block)
                return pos, middle
            return pos, end_block
        if rows.selected >= limit and rows.last is not None:
            # The range holds more garbage than one batch may delete: go on right after it.
            rest: tuple[tuple[int, int], int] | None = ((rows.last[0], rows.last[1] + 1), end_block)
            covered = rows.last[0] - pos[0] + 1
        else:
            rest = None
            covered = span
        if deleter.splitter.limit is None:
            self.ranges.span = next_span(
                span,
                limit,
                deleter.limit() * RANGE_FILL,
                rows.selected,
                covered,
                seconds,
                target,
                self.fixed,
            )
        if rest is None:
            self.ranges.finished()
        return rest


def follow_index(deleter: Deleter) -> StopReason:
    """Delete one heap's garbage through the predicate's index, at most the sizer's limit of
    rows per batch, until a batch comes back short; returns stopped_by.

    Where the predicate's index returns the victims in their age's order
    (:meth:`reaper.db.Session.keyset_served`, asked once per heap and run), the run keeps a
    keyset: each batch starts at the greatest age the last one selected, so it never reads
    again the index entries of the rows the run deleted (an index walk that restarts from the
    front each batch reads them all again: quadratic in the rows deleted)."""
    run, hs = deleter.run, deleter.hs
    session, stmts, params = run.session, run.statements, run.params
    served = session.keyset_served(stmts, hs, params, deleter.sizer.size)
    keyset = KEYSET_START if served else None
    while True:
        stopped = run.should_stop()
        if stopped:
            return stopped
        limit = deleter.limit()
        rows = deleter.attempt(
            limit,
            functools.partial(
                session.delete_index_batch,
                stmts,
                hs,
                params,
                limit,
                list(deleter.skip),
                before_commit=run.before_commit,
                keyset=keyset,
            ),
            functools.partial(
                session.first_victim, stmts, hs, params, list(deleter.skip), keyset=keyset
            ),
        )
        if rows is None:
            continue
        if keyset is not None and rows.key is not None:
            keyset = rows.key
        if rows.selected < limit:
            return StopReason.DONE

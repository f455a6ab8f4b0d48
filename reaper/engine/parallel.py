"""The parallel heap walk: one heap's block ranges deleted on several connections at once.

Each range is deleted by the same batches as the walk on one connection
(:func:`reaper.engine.heaprange.range_batch`), each worker by a deleter of its own
(:meth:`reaper.engine.deleter.Deleter.helper`). docs/engine.md, "Parallel heap ranges".
"""

from __future__ import annotations

import contextlib
import threading

import structlog

from reaper import errors
from reaper.engine.deleter import Deleter
from reaper.engine.failures import LOCK_NOT_AVAILABLE, isolable
from reaper.engine.heaprange import MIN_BLOCKS_PER_BATCH, range_batch
from reaper.vocab import SkipReason, StopReason

log = structlog.get_logger("reaper.runner")

# A parallel heap walk's own thread looks at its helpers this often (seconds) once every range
# is handed out, pacing them (Gate.before_batch) until they finish; a helper that may not
# delete (the database is busy) looks again this often.
PARALLEL_POLL_SECONDS = 0.02


def _table_lock_wait(exc: errors.DatabaseError) -> bool:
    """Whether ``exc`` is a wait past the batch's lock timeout for a lock that no row is to
    blame for (:func:`reaper.engine.failures.isolable`): in a parallel walk, perhaps a lock
    another worker's statement held."""
    cause = exc.__cause__ if isinstance(exc.__cause__, errors.DatabaseError) else exc
    return cause.sqlstate == LOCK_NOT_AVAILABLE and not isolable(cause)


class Ranges:
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


class ParallelWalk:
    """One heap's walk on the run's session and up to ``parallel - 1`` helpers, each a thread
    on its own pooled connection (:meth:`reaper.db.Database.helper_session`), over disjoint
    block ranges (:class:`Ranges`). Each range is deleted by the same short batches as the
    walk on one connection, by a deleter of its own (:meth:`Deleter.helper`).

    The run's own thread leads: before each of its batches it asks :meth:`Gate.before_batch`
    (the pacer, the budget, the durable count), and lets the helpers delete only once one of
    its own batches removed the rows it named (a stalled heap stops at its first batch, as
    on one connection), and only while the database is idle (:meth:`Gate.idle`): otherwise
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
        self.ranges = Ranges(end, span)
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
            for i in range(1, self.run.spec.options.parallel)
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
            stopped = run.gate.before_batch()
            if stopped:
                if held is not None:
                    self.ranges.give_back(*held)
                return stopped
            if self.proven and not self.alone and run.gate.idle():
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
            before = run.tally.rows
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
            if deleter.guard.short == 0 and run.tally.rows > before:
                self.proven = True

    def _help(self) -> None:
        try:
            with contextlib.ExitStack() as stack:
                assert self.run.tools.helper_session is not None
                try:
                    session = stack.enter_context(self.run.tools.helper_session())
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
            if self.halt.is_set() or self.alone or self.run.gate.limits() is not None:
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
        with self._lock:
            left = self.run.gate.rows_left(self._reserved)
            if left is None:
                return limit
            limit = min(limit, left)
            if limit > 0:
                self._reserved += limit
            return limit

    def _release(self, limit: int) -> None:
        if self.run.spec.budget.max_rows is not None:
            with self._lock:
                self._reserved -= limit

    def _batch(
        self, deleter: Deleter, pos: tuple[int, int], end_block: int, limit: int
    ) -> tuple[tuple[int, int], int] | None:
        """One batch of the range from ``pos`` to ``end_block``; returns what is left of the
        range (None: the range is finished, or given back)."""
        span = end_block - pos[0]
        step = range_batch(deleter, pos, end_block, limit, span, self.target_seconds, self.fixed)
        if step.rows is None:
            if deleter.last_failure == SkipReason.TIMEOUT and span > MIN_BLOCKS_PER_BATCH:
                # Past statement_timeout: the range's scan may be what is slow, not the rows.
                # Its second half is handed out again; the first is tried alone.
                middle = pos[0] + span // 2
                self.ranges.split((middle, 0), end_block)
                return pos, middle
            return pos, end_block
        if step.span is not None:
            self.ranges.span = step.span
        if step.pos[0] >= end_block:
            self.ranges.finished()
            return None
        return step.pos, end_block

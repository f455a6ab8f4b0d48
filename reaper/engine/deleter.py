"""The deleter of one heap: splits a failing batch and skips the row that fails alone.

Never repeats a failing batch unchanged: each retry is a half of it, or leaves out the row
that failed alone; a row found undeletable is left out of the process's later runs too
(docs/engine.md, "Rows that cannot be deleted"). Never repeats a batch that removed nothing:
the run stops (docs/engine.md, "A run ends").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import structlog

from reaper import errors
from reaper.db import BatchRows, DeleteObstacle, HeapStatements
from reaper.engine.context import Run
from reaper.engine.failures import held_row, isolable, run_failure, skip_reason
from reaper.engine.port import BatchSession
from reaper.engine.sizing import BatchSizer, Splitter
from reaper.engine.stalls import StallGuard
from reaper.vocab import ObstacleKind, SkipReason

log = structlog.get_logger("reaper.runner")

# While the database is busy, a batch's limit follows busy_batch_seconds, but never below
# this many rows: fewer would cost more in round trips than they delete.
MIN_BUSY_ROWS = 100
# The fixed part of a heap-walk batch is measured this many times before a walk (the least
# counts: the first may pay for a plan or a cold cache).
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
        lead: the deleter whose heap this one helps walk (:meth:`helper`), whose busy
            limit, rows left out and catalog findings it starts from (None: a heap's first
            deleter, which reads them).
    """

    def __init__(
        self,
        run: Run,
        hs: HeapStatements,
        sizer: BatchSizer,
        session: BatchSession | None = None,
        *,
        lead: Deleter | None = None,
    ) -> None:
        self.run, self.hs, self.sizer = run, hs, sizer
        self.session = session or run.tools.session
        # A deleter's own: its batches' splitter, stall guard and last failure.
        self.splitter = Splitter()
        self.guard = StallGuard()
        # Why the last attempt failed, None after a success.
        self.last_failure: SkipReason | None = None
        # What a helper starts from, as its lead has it: the row limit while the database is
        # busy (None: not busy, or not measured yet), the rows left out, and what the catalog
        # says can keep this heap's deletes from removing their rows (None: not asked yet;
        # asked once, when a choice or a stalled batch needs it).
        self.busy_limit: int | None = None if lead is None else lead.busy_limit
        self._obstacles: list[DeleteObstacle] | None = None if lead is None else lead.obstacles()
        self.skip: list[tuple[int, int]] = (
            self._known_undeletable() if lead is None else list(lead.skip)
        )

    def _known_undeletable(self) -> list[tuple[int, int]]:
        """The rows of this heap that an earlier run of the process found undeletable and
        that still stand unchanged: left out of every batch of this run, unattempted."""
        run, oid = self.run, self.hs.heap.oid
        if run.tools.undeletable is None:
            return []
        known = run.tools.undeletable.recall(oid, run.tools.clock())
        if not known:
            return []
        versions = self.session.row_versions(run.spec.statements, self.hs, sorted(known))
        kept = run.tools.undeletable.still_undeletable(oid, versions, run.tools.clock())
        run.tally.known_undeletable(len(kept))
        return sorted(kept)

    def helper(self, session: BatchSession) -> Deleter:
        """A deleter of the same heap on ``session``, for a helper of a parallel heap walk.

        The rows this one leaves out and what the catalog says of the heap are its too (read
        already); the sizer is shared, so that a batch past statement_timeout on any worker
        makes every worker's batches smaller; its splitter and stall guard are its own, as
        its batches are."""
        return Deleter(self.run, self.hs, self.sizer, session, lead=self)

    def fixed_seconds(self) -> float:
        """What one heap-walk batch of this heap costs whatever its rows, in seconds: the
        least of FIXED_PROBES batches over no block (:meth:`reaper.db.Session.empty_batch`);
        0 when such a batch fails (the walk's own batches then meet the failure)."""
        run = self.run
        least = math.inf
        for _ in range(FIXED_PROBES):
            t0 = run.tools.clock()
            try:
                self.session.empty_batch(run.spec.statements, self.hs, run.spec.params)
            except errors.DatabaseError:
                return 0.0
            least = min(least, run.tools.clock() - t0)
        return max(least, 0.0)

    def obstacles(self) -> list[DeleteObstacle]:
        """What the catalog says can keep this heap's deletes from removing the rows they
        name (read once per run of the heap)."""
        if self._obstacles is None:
            self._obstacles = self.session.delete_obstacles(self.hs)
        return self._obstacles

    def limit(self) -> int:
        """The next batch's row limit: the sizer's (or the splitter's while a batch fails),
        and while the database is busy (:meth:`Gate.busy_seconds`) at most the busy limit,
        which follows the batches' durations toward that target (:meth:`_measured`)."""
        limit = self.splitter.next_limit(self.sizer.size)
        if self.run.gate.busy_seconds() is None:
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
        busy = self.run.gate.busy_seconds()
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
        t0 = self.run.tools.clock()
        self.last_failure = None
        if limit <= 1:
            return self._one_row(first_victim, t0)
        try:
            rows = batch()
        except errors.DatabaseError as exc:
            self._failed(exc, limit)
            return None
        seconds = self.run.tools.clock() - t0
        self.splitter.succeeded(limit, rows.selected)
        self.sizer.succeeded(seconds)
        self._measured(limit, seconds)
        self.run.tally.batch(rows.deleted, seconds)
        self._progressed(rows.selected, rows.deleted)
        self.run.tally.deleted_keys(self.hs.heap.table, self.hs.trail.keys, rows)
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
        if isolable(exc) and not self.run.gate.stopping():
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
            self.run.tally.timed_out()
            self.sizer.timed_out()
        elif reason == SkipReason.LOCKED:
            self.run.tally.contended()
        held = held_row(exc, self.hs.heap.name)
        if held is not None and held not in self.skip:
            # The server named the row a writer holds: leave it out, and retry the batch
            # without it (not split: the other rows are not in the way).
            self.skip.append(held)
            self.run.tally.skipped(self.hs.heap.table, held, exc)
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
                run.spec.statements,
                self.hs,
                run.spec.params,
                tid,
                before_commit=run.tools.before_commit,
            )
        except errors.DatabaseError as exc:
            self._fail_run(exc)
            reason = skip_reason(exc)
            if reason == SkipReason.TIMEOUT:
                run.tally.timed_out()
            self.skip.append(tid)
            run.tally.skipped(self.hs.heap.table, tid, exc)
            if reason != SkipReason.LOCKED:
                self._remember(tid, reason)
            self.splitter.succeeded(1)
            return BatchRows(0, 1, tid)
        seconds = run.tools.clock() - t0
        self.splitter.succeeded(1)
        self.sizer.succeeded(seconds)
        run.tally.batch(rows.deleted, seconds)
        run.tally.deleted_keys(self.hs.heap.table, self.hs.trail.keys, rows)
        self._progressed(1, rows.deleted)
        return rows

    def _remember(self, tid: tuple[int, int], reason: SkipReason) -> None:
        """Keep the row at ``tid``, whose delete failed alone, as undeletable for the
        process's later runs, in the version it has now (a row a writer held is busy, not
        undeletable: never remembered)."""
        run = self.run
        if run.tools.undeletable is None:
            return
        xmin = self.session.row_versions(run.spec.statements, self.hs, [tid]).get(tid)
        if xmin is not None:
            run.tools.undeletable.remember(self.hs.heap.oid, tid, xmin, reason, run.tools.clock())

"""The batches of one heap: the two ways of finding a batch's victims, the heap walk and
the index path (:func:`reaper.engine.strategy.choose_strategy` picks one per heap); the
deleter that runs each batch is :class:`reaper.engine.deleter.Deleter`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Protocol

from reaper.config.engine import EngineOptions
from reaper.db import KEYSET_START
from reaper.engine.deleter import Deleter
from reaper.engine.heaprange import MIN_BLOCKS_PER_BATCH, first_span, range_batch
from reaper.engine.parallel import ParallelWalk
from reaper.vocab import SkipReason, StopReason, Strategy


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
    then from what each batch found (:func:`reaper.engine.heaprange.next_span`).

    With ``--parallel`` above 1 and more than one range to walk, the ranges are handed out
    to the run's own session and up to ``parallel - 1`` helpers, each on its own connection
    (:class:`reaper.engine.parallel.ParallelWalk`), unless the catalog names something that
    may keep a delete from removing the rows it names (:meth:`Deleter.ranges_tell`): such a
    heap is walked on one connection.
    """
    run, hs = deleter.run, deleter.hs
    end = hs.heap.stats.blocks
    span = first_span(deleter, estimated_fraction)
    fixed = deleter.fixed_seconds() if end > 0 else 0.0
    if (
        run.spec.options.parallel > 1
        and run.tools.helper_session is not None
        and end > span
        and deleter.ranges_tell()
    ):
        return ParallelWalk(deleter, end, span, fixed, target_seconds).walk()
    pos = (0, 0)
    while pos[0] < end:
        stopped = run.gate.before_batch()
        if stopped:
            return stopped
        limit = deleter.limit()
        step = range_batch(
            deleter, pos, min(pos[0] + span, end), limit, span, target_seconds, fixed
        )
        if step.rows is None:
            if deleter.last_failure == SkipReason.TIMEOUT:
                # Past statement_timeout: the range's scan may be what is slow, not the rows.
                span = max(MIN_BLOCKS_PER_BATCH, span // 2)
            continue
        pos = step.pos
        if step.span is not None:
            span = step.span
    return StopReason.DONE


def follow_index(deleter: Deleter) -> StopReason:
    """Delete one heap's garbage through the predicate's index, at most the sizer's limit of
    rows per batch, until a batch comes back short; returns stopped_by.

    Where the predicate's index returns the victims in their age's order
    (:meth:`reaper.db.Session.keyset_served`, asked once per heap and run), the run keeps a
    keyset: each batch starts at the greatest age the last one selected, so it never reads
    again the index entries of the rows the run deleted (an index walk that restarts from the
    front each batch reads them all again: quadratic in the rows deleted)."""
    run, hs = deleter.run, deleter.hs
    session, stmts, params = run.tools.session, run.spec.statements, run.spec.params
    served = session.keyset_served(stmts, hs, params, deleter.sizer.size)
    keyset = KEYSET_START if served else None
    while True:
        stopped = run.gate.before_batch()
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
                before_commit=run.tools.before_commit,
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

"""Heap walk or index: which way a run finds one heap's garbage, from a block sample.

The fraction is measured on a sample, not asked of the planner: the planner's estimate of a
predicate with a subquery parameter can be off a hundredfold (docs/performance.md, "The
engine's numbers and where they come from"), and a block sample costs a few milliseconds.
"""

from __future__ import annotations

from reaper.db import MIN_HEAP_WALK_VERSION, HeapStatements
from reaper.engine.context import Run
from reaper.vocab import Strategy

# Never-analyzed table: the first heap range is this many blocks, and adapts from there; a
# table no larger than that is left to the index, as the walk would save nothing.
FIRST_BLOCKS_UNKNOWN = 64
# About this many heap blocks are sampled: a few milliseconds (docs/performance.md).
SAMPLE_BLOCKS = 300
# auto walks the heap when the index would take more batches than this: each index batch
# re-reads the dead index entries of the ones before (docs/performance.md).
MAX_INDEX_BATCHES = 10


def sample_percent(blocks: int) -> float:
    """The TABLESAMPLE SYSTEM percentage that reads about SAMPLE_BLOCKS of a heap of
    ``blocks`` blocks (all of a heap that small)."""
    return min(100.0, 100.0 * SAMPLE_BLOCKS / blocks)


def choose_strategy(
    run: Run, hs: HeapStatements, sample: tuple[int, int, float] | None = None
) -> tuple[Strategy, float | None]:
    """``(strategy, fraction)`` for one heap ``hs`` of ``run``: ``heap`` or ``index``, and the
    fraction of the heap that is garbage, measured on a sample of about SAMPLE_BLOCKS heap
    blocks (None when not measured).

    The heap walk reads every block once, so it wins when garbage is at least
    ``heap_walk_threshold`` of the table; the index wins when garbage is scattered. The index
    path also gives way when the sample projects more than MAX_INDEX_BATCHES batches of the
    sweep's batch size. Servers before PostgreSQL 14 have no TID range scan and always use
    the index. The sweep's ``strategy`` (resolved at load) may force
    one. ``sample``: ``(eligible, sampled, percent)`` of this heap already
    measured (:func:`reaper.engine.interlock.measure_eligible`), reused.
    """
    session, spec = run.tools.session, run.spec
    options, sweep = spec.options, spec.sweep
    wanted = sweep.strategy
    batch_size = sweep.batch_size
    if session.server_version < MIN_HEAP_WALK_VERSION or wanted == Strategy.INDEX:
        # A forced index path needs no sample: the fraction only sizes the walk's first range.
        return Strategy.INDEX, None
    stats = hs.heap.stats
    if stats.blocks <= FIRST_BLOCKS_UNKNOWN and wanted == Strategy.AUTO:
        return Strategy.INDEX, None
    if stats.blocks == 0:
        return Strategy(wanted), 0.0
    if sample is not None:
        eligible, sampled, percent = sample
    else:
        percent = sample_percent(stats.blocks)
        eligible, sampled = session.sample_eligible(spec.statements, hs, spec.params, percent)
    fraction = eligible / sampled if sampled else 0.0
    if wanted != Strategy.AUTO:
        return Strategy(wanted), fraction
    projected_batches = eligible * 100.0 / percent / batch_size
    if fraction >= options.heap_walk_threshold or projected_batches > MAX_INDEX_BATCHES:
        return Strategy.HEAP, fraction
    return Strategy.INDEX, fraction

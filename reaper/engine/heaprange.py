"""A heap walk's block ranges: how large the next one is, and one batch of one range.

Both walks, on one connection (:func:`reaper.engine.batches.walk_heap`) and on several
(:mod:`reaper.engine.parallel`), delete a range by the same batches: :func:`range_batch`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from reaper.db import BatchRows
from reaper.engine.deleter import Deleter
from reaper.engine.strategy import FIRST_BLOCKS_UNKNOWN

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
# A heap walk's batch spends at most about this share of its time on what every batch costs
# whatever its rows (round trips, statement-level triggers, a slow link): where that fixed
# part alone exceeds the batch time target, ranges aim at that part divided by FIXED_SHARE.
FIXED_SHARE = 0.25


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
    (:meth:`reaper.engine.deleter.Deleter.fixed_seconds`), and a part that grows with its
    blocks and rows; only the second scales with the range. So the range is scaled by the
    time left after the fixed part, and where the fixed part alone is more than FIXED_SHARE
    of ``target`` the batch aims at ``fixed / FIXED_SHARE`` instead: a fixed cost makes
    ranges larger, never smaller, and a walk crosses the live part of a table in a few statements.

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


@dataclass(frozen=True)
class RangeStep:
    """What one batch of a block range did.

    Attributes:
        rows: what it deleted (None: it failed; :attr:`Deleter.last_failure` says why).
        pos: where the range goes on: right after the last row a capped batch selected,
            else the range's end (the batch covered it); after a failure, where it began.
        span: the next range's size in blocks, as this batch measured it (None: keep the
            size: the batch failed, or a failing batch is being split).
    """

    rows: BatchRows | None
    pos: tuple[int, int]
    span: int | None


def range_batch(
    deleter: Deleter,
    pos: tuple[int, int],
    end_block: int,
    limit: int,
    span: int,
    target_seconds: float,
    fixed: float,
) -> RangeStep:
    """One batch of at most ``limit`` rows over the blocks from ``pos`` to ``end_block``.

    ``span`` is the range's size the batch was planned at, ``target_seconds`` how long a
    batch aims to take while the database is idle, ``fixed`` what any batch costs
    (:func:`next_span`)."""
    run, hs, session = deleter.run, deleter.hs, deleter.session
    stmts, params = run.spec.statements, run.spec.params
    target = run.gate.busy_seconds() or target_seconds
    t0 = run.tools.clock()
    rows = deleter.attempt(
        limit,
        functools.partial(
            session.delete_heap_batch,
            stmts,
            hs,
            params,
            pos,
            end_block,
            limit,
            list(deleter.skip),
            deleter.trusts_ranges(),
            before_commit=run.tools.before_commit,
        ),
        functools.partial(
            session.first_victim, stmts, hs, params, list(deleter.skip), pos, end_block
        ),
    )
    seconds = run.tools.clock() - t0
    if rows is None:
        return RangeStep(None, pos, None)
    if rows.selected >= limit and rows.last is not None:
        # The range holds more garbage than one batch may delete: go on right after it.
        rest = (rows.last[0], rows.last[1] + 1)
        covered = rows.last[0] - pos[0] + 1
    else:
        rest = (end_block, 0)
        covered = end_block - pos[0]
    if deleter.splitter.limit is not None:
        # Splitting a failing batch: its next part is the next victims from here, so the
        # range keeps its size (a range sized to a part would leave the part's victims
        # out of it).
        return RangeStep(rows, rest, None)
    return RangeStep(
        rows,
        rest,
        next_span(
            span,
            limit,
            deleter.limit() * RANGE_FILL,
            rows.selected,
            covered,
            seconds,
            target,
            fixed,
        ),
    )

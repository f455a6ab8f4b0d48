"""A statement's fixed cost is part of a batch's cost: where every batch pays a part that
does not depend on its rows (a statement-level trigger, a transition table, a round trip on
a slow link) and that part alone exceeds the batch time target, a heap walk makes its ranges
larger, not smaller, and crosses the live part of a table in a few statements. Against an
in-memory session (tests/unit/engine/fakes.py); PostgreSQL itself: tests/db/engine/
test_fixed_cost.py."""

from __future__ import annotations

import itertools

import pytest

from reaper.engine.heaprange import FIXED_SHARE, MAX_BLOCKS_PER_BATCH, next_span
from reaper.vocab import StopReason, Strategy
from tests.unit.engine.fakes import FakeHeap, FakeSession
from tests.unit.engine.test_decisions import _run, _sweep_heap

TARGET = 0.05


@pytest.mark.parametrize("fixed", [0.06, 0.2, 1.0])
def test_sparse_garbage_and_a_live_tail_take_a_few_batches(fixed: float) -> None:
    # One garbage row in every fourth block of the first tenth, then live rows only: each
    # batch costs ``fixed`` seconds whatever it holds, more than the 50 ms target.
    garbage = [(b, 1) for b in range(0, 2000, 4)]
    heap = FakeHeap.of(
        "nodes",
        blocks=20_000,
        per_block=10,
        garbage=garbage,
        batch_seconds=fixed,
        block_seconds=0.000_01,
        row_seconds=0.000_01,
    )
    session = FakeSession()
    run = _run(session, heap)
    assert run.spec.options.batch_target_seconds == TARGET
    assert _sweep_heap(run, Strategy.HEAP, fraction=0.005) == StopReason.DONE
    assert heap.garbage == [] and run.result.rows == 500
    spans = [end - first for first, end in session.ranges]
    # Ranges only grow; a one-block-per-statement crawl took 1,130 batches here.
    assert all(b >= a for a, b in itertools.pairwise(spans[:-1])), spans
    assert len(spans) <= 8, spans
    # Measured once per walk, by batches over no block.
    assert session.calls["empty_batch"] == 2


def test_a_fixed_cost_never_makes_the_next_range_smaller() -> None:
    # The more of a batch's time that is fixed (at or past the target), the larger the next
    # range.
    for selected, seconds in [(0, 0.2), (10, 0.21), (500, 0.3), (100, 0.06)]:
        spans = [
            next_span(512, 20_000, 16_000, selected, 512, seconds, TARGET, fixed)
            for fixed in (0.0, TARGET, min(seconds, 0.2))
        ]
        assert spans == sorted(spans), (selected, seconds, spans)
    # With no fixed part the rule is the time target alone, as before.
    assert next_span(512, 20_000, 16_000, 100, 512, 0.1, TARGET) == 256
    # Time left after the fixed part: a batch of 0.2 s of which 0.19 s fixed, aiming at
    # 0.76 s (the fixed part is at most FIXED_SHARE of it), may double.
    assert FIXED_SHARE == 0.25
    assert next_span(512, 20_000, 16_000, 100, 512, 0.2, TARGET, 0.19) == 1024
    assert (
        next_span(MAX_BLOCKS_PER_BATCH, 20_000, 16_000, 0, MAX_BLOCKS_PER_BATCH, 0.3, TARGET, 0.2)
        == MAX_BLOCKS_PER_BATCH
    )

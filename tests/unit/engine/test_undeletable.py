"""Undeletable rows cost little, once: k rows that fail among n are isolated in about
k * log2(n) failed statements, the rows around them all go, and the process's later runs
leave them out untried while they stand unchanged (reaper.engine.undeletable), against an
in-memory session (tests/unit/engine/fakes.py). PostgreSQL itself: tests/db/engine/
test_undeletable.py."""

from __future__ import annotations

import dataclasses
import math

import pytest

from reaper.engine.context import Run
from reaper.engine.sizing import Splitter
from reaper.engine.undeletable import MAX_ROWS_PER_HEAP, REMEMBER_SECONDS, UndeletableRows
from reaper.vocab import SkipReason, Strategy
from tests.unit.engine.fakes import FakeHeap, FakeSession
from tests.unit.engine.test_decisions import _run, _sweep_heap

STRATEGIES = pytest.mark.parametrize("strategy", [Strategy.INDEX, Strategy.HEAP])


def _refusing(n: int, k: int, **kwargs: object) -> FakeHeap:
    """``n`` garbage rows (and as many live ones) of which ``k``, evenly spread, a foreign key
    keeps."""
    per_block = 20
    blocks = -(-2 * n // per_block)
    tids = [(b, o) for b in range(blocks) for o in range(1, per_block + 1)]
    garbage = tids[::2][:n]
    refused = set(garbage[n // (2 * k) :: n // k][:k])
    return FakeHeap.of(
        "nodes", blocks=blocks, per_block=per_block, garbage=garbage, refused=refused, **kwargs
    )  # type: ignore[arg-type]


def _with_memory(session: FakeSession, heap: FakeHeap, memory: UndeletableRows) -> Run:
    run = _run(session, heap)
    return dataclasses.replace(run, tools=dataclasses.replace(run.tools, undeletable=memory))


@STRATEGIES
@pytest.mark.parametrize(("n", "k"), [(4096, 1), (4096, 16), (2048, 64), (1024, 32)])
def test_k_undeletable_rows_among_n_cost_at_most_k_log_n_failed_statements(
    strategy: Strategy, n: int, k: int
) -> None:
    heap = _refusing(n, k)
    session = FakeSession()
    run = _run(session, heap)
    _sweep_heap(run, strategy, fraction=0.5, batch_size=n)
    assert len(heap.garbage) == k
    assert run.result.rows == n - k
    assert run.result.skipped == {SkipReason.FOREIGN_KEY: k}
    # Each row that fails costs the failed batches above it, about log2(n), then its own
    # delete alone; the parts that succeeded are never tried again.
    assert session.failed <= k * (math.ceil(math.log2(n)) + 1), session.failed


@STRATEGIES
def test_a_later_run_leaves_the_undeletable_rows_out_untried(strategy: Strategy) -> None:
    memory = UndeletableRows()
    heap = _refusing(1000, 10)
    first = FakeSession()
    run = _with_memory(first, heap, memory)
    _sweep_heap(run, strategy, fraction=0.5, batch_size=1000)
    assert first.failed > 0 and len(heap.garbage) == 10
    # New garbage arrives: the next run deletes it at full size, without a failed statement.
    for tid in list(heap.rows)[:300]:
        if not heap.rows[tid]:
            heap.rows[tid] = True
    fresh = len(heap.garbage) - 10
    second = FakeSession()
    again = _with_memory(second, heap, memory)
    _sweep_heap(again, strategy, fraction=0.5, batch_size=1000)
    assert second.failed == 0
    assert again.result.rows == fresh
    assert again.result.skipped == {}
    assert again.result.known_undeletable == 10
    assert len(heap.garbage) == 10


@STRATEGIES
def test_a_changed_row_and_an_expired_one_are_tried_again(strategy: Strategy) -> None:
    memory = UndeletableRows()
    heap = _refusing(1000, 10)
    run = _with_memory(FakeSession(), heap, memory)
    _sweep_heap(run, strategy, fraction=0.5, batch_size=1000)
    held = heap.garbage
    # One row changes (a new version: its xmin); the reference to another goes.
    heap.versions[held[0]] = 7
    heap.refused.discard(held[0])
    heap.refused.discard(held[1])
    session = FakeSession(clock=run.tools.clock)  # type: ignore[arg-type]
    again = _with_memory(session, heap, memory)
    _sweep_heap(again, strategy, fraction=0.5, batch_size=1000)
    # The changed row is tried and goes; the unchanged one is left until the memory expires.
    assert again.result.rows == 1
    assert again.result.known_undeletable == 9
    assert held[0] not in heap.rows and held[1] in heap.rows
    session.clock.advance(REMEMBER_SECONDS + 1)
    last = _with_memory(session, heap, memory)
    _sweep_heap(last, strategy, fraction=0.5, batch_size=1000)
    assert last.result.rows == 1 and held[1] not in heap.rows
    assert last.result.skipped == {SkipReason.FOREIGN_KEY: 8}


def test_a_row_a_writer_held_is_not_remembered() -> None:
    memory = UndeletableRows()
    garbage = [(0, o) for o in range(1, 11)]
    heap = FakeHeap.of("nodes", blocks=1, per_block=20, garbage=garbage, held={(0, 4)})
    run = _with_memory(FakeSession(), heap, memory)
    _sweep_heap(run, Strategy.INDEX)
    assert run.result.skipped == {SkipReason.LOCKED: 1}
    assert memory.recall(heap.oid, run.tools.clock()) == {}


def test_the_memory_of_a_heap_is_bounded() -> None:
    memory = UndeletableRows()
    for i in range(MAX_ROWS_PER_HEAP):
        assert memory.remember(1, (i, 1), "5", SkipReason.ERROR, 0.0)
    assert not memory.remember(1, (0, 2), "5", SkipReason.ERROR, 0.0)
    assert memory.remember(2, (0, 2), "5", SkipReason.ERROR, 0.0)


def test_a_split_tries_each_half_once() -> None:
    splitter = Splitter()
    # 8 rows, the 6th fails: 8 fails; 4 (rows 1-4) goes; 4 (5-8) fails; 2 (5-6) fails; row 5
    # goes; row 6 fails alone; row 7-8 go as one part.
    assert splitter.failed(8) == 4
    splitter.succeeded(4, 4)
    assert splitter.limit == 4
    assert splitter.failed(4) == 2
    assert splitter.failed(2) == 1
    splitter.succeeded(1)
    assert splitter.limit == 1
    splitter.succeeded(1)
    assert splitter.limit == 2
    splitter.succeeded(2, 2)
    assert splitter.limit is None
    # A part that finds fewer victims than its limit found the last of them.
    splitter.failed(100)
    splitter.succeeded(50, 20)
    assert splitter.limit is None

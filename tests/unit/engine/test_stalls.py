"""A run ends: batches that name rows and remove none (a trigger that returns NULL, a
row-level security policy, a rule) stop the run with one line naming the cause, against an
in-memory session (tests/unit/engine/fakes.py). PostgreSQL itself: tests/db/engine/
test_stalls.py."""

from __future__ import annotations

import pytest

from reaper import errors
from reaper.db import DeleteObstacle
from reaper.engine.deleter import Deleter
from reaper.engine.sizing import BatchSizer
from reaper.engine.stalls import MAX_SHORT_BATCHES, StallGuard
from reaper.vocab import ObstacleKind, Strategy
from tests.unit.engine.fakes import FakeHeap, FakeSession
from tests.unit.engine.test_decisions import _run, _sweep_heap

SOFT_DELETE = DeleteObstacle(
    ObstacleKind.TRIGGER,
    "soft_delete",
    "BEFORE DELETE row trigger soft_delete on public.nodes (function public.soft())",
)
POLICY = DeleteObstacle(
    ObstacleKind.POLICY,
    "p_delete",
    "row-level security on public.nodes applies to role reaper (no BYPASSRLS) and its "
    "DELETE policies (p_delete) do not match its SELECT policies",
)


def _heap(
    kept: set[tuple[int, int]] | None = None,
    obstacles: list[DeleteObstacle] | None = None,
    garbage: int = 400,
) -> FakeHeap:
    tids = [(b, o) for b in range(100) for o in range(1, 11)][:garbage]
    return FakeHeap.of(
        "nodes",
        blocks=100,
        per_block=10,
        garbage=tids,
        kept=set(tids) if kept is None else kept,
        obstacles=obstacles or [],
    )


@pytest.mark.parametrize("strategy", [Strategy.INDEX, Strategy.HEAP])
@pytest.mark.parametrize("obstacle", [SOFT_DELETE, POLICY], ids=["trigger", "policy"])
def test_a_batch_that_removes_none_of_its_rows_ends_the_run_naming_the_cause(
    strategy: Strategy,
    obstacle: DeleteObstacle,
) -> None:
    heap = _heap(obstacles=[obstacle])
    session = FakeSession()
    run = _run(session, heap)
    with pytest.raises(errors.BatchStalled) as caught:
        _sweep_heap(run, strategy, fraction=0.4, batch_size=100)
    message = str(caught.value)
    assert "\n" not in message
    assert "nodes named 100 rows and removed none" in message
    assert obstacle.detail in message
    # Not repeated: one batch, and the catalog asked once.
    assert (
        session.calls.get("delete_index_batch", 0) + session.calls.get("delete_heap_batch", 0) == 1
    )
    assert session.calls["delete_obstacles"] == 1
    assert len(heap.garbage) == 400


def test_a_heap_walk_never_trusts_a_range_where_the_catalog_names_an_obstacle() -> None:
    # A range deleted in place returns only the rows it removed: on a table whose trigger
    # keeps them, it would look like a range without garbage, and the run would succeed.
    heap = _heap(obstacles=[SOFT_DELETE])
    run = _run(FakeSession(), heap)
    (hs,) = run.spec.statements.heaps
    deleter = Deleter(run, hs, BatchSizer(100))
    assert not deleter.trusts_ranges()
    plain = _run(FakeSession(), _heap(kept=set()))
    (hs,) = plain.spec.statements.heaps
    assert Deleter(plain, hs, BatchSizer(100)).trusts_ranges()


def test_without_a_cause_the_second_empty_batch_ends_the_run() -> None:
    heap = _heap()
    session = FakeSession()
    run = _run(session, heap)
    with pytest.raises(errors.BatchStalled, match="the catalog names no cause"):
        _sweep_heap(run, Strategy.INDEX, batch_size=100)
    assert session.calls["delete_index_batch"] == 2


def test_batches_that_remove_far_fewer_than_they_name_end_the_run() -> None:
    # Two rows in three are kept: every index batch re-selects the kept ones, and removes
    # fewer and fewer, never none.
    tids = [(b, o) for b in range(100) for o in range(1, 11)][:600]
    heap = FakeHeap.of(
        "nodes",
        blocks=100,
        per_block=10,
        garbage=tids,
        kept={t for i, t in enumerate(tids) if i % 3},
    )
    session = FakeSession()
    run = _run(session, heap)
    with pytest.raises(errors.BatchStalled, match="such batches in a row"):
        _sweep_heap(run, Strategy.INDEX, batch_size=90)
    assert session.calls["delete_index_batch"] <= MAX_SHORT_BATCHES + 1


@pytest.mark.parametrize("strategy", [Strategy.INDEX, Strategy.HEAP])
def test_a_batch_that_removes_a_few_rows_less_goes_on(strategy: Strategy) -> None:
    # A refreshed member or two in a batch is not a stall: the run deletes the rest.
    tids = [(b, o) for b in range(100) for o in range(1, 11)][:400]
    heap = _heap(kept={tids[5], tids[150]})
    run = _run(FakeSession(), heap)
    _sweep_heap(run, strategy, fraction=0.4, batch_size=100)
    assert heap.garbage == sorted({tids[5], tids[150]})


def test_the_guard() -> None:
    guard = StallGuard()
    # A batch that named nothing says nothing; a full one resets the count.
    assert not guard.observe(0, 0)
    assert guard.observe(10, 0) and not guard.stalled(cause_known=False)
    assert not guard.observe(10, 9)
    assert guard.observe(1, 0) and guard.stalled(cause_known=True)
    guard = StallGuard()
    assert guard.observe(1, 0) and not guard.stalled(cause_known=False)
    assert guard.observe(1, 0) and guard.stalled(cause_known=False)
    guard = StallGuard()
    for _ in range(MAX_SHORT_BATCHES - 1):
        assert guard.observe(10, 4) and not guard.stalled(cause_known=True)
    assert guard.observe(10, 4) and guard.stalled(cause_known=False)

"""A run's maintenance window against an in-memory session on a fake clock: the run stops
before the first batch that would start at or after the window's end, the batch in flight
finishes, and ``stopped_by`` says ``window_closed`` (a budget that ends first says its own)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from reaper.config.engine import engine_options
from reaper.config.sweeps import Budget
from reaper.engine.context import Run, RunSpec, RunTools
from reaper.metrics import Metrics
from reaper.vocab import BUDGET_STOPS, StopReason, Strategy
from tests.unit.engine.fakes import FakeHeap, FakeSession, statements
from tests.unit.engine.test_decisions import SWEEP, _settings, _sweep_heap

GARBAGE = [(b, o) for b in range(20) for o in range(1, 11)]


def _windowed_run(budget: Budget) -> tuple[Run, FakeHeap]:
    heap = FakeHeap.of("nodes", 20, 10, GARBAGE, batch_seconds=1.0)
    session = FakeSession()
    run = Run.begin(
        RunSpec(SWEEP, statements(heap), {}, engine_options(_settings()), budget),
        RunTools(session, clock=session.clock),  # type: ignore[arg-type]
        metrics=Metrics([SWEEP], CollectorRegistry()),
    )
    return run, heap


@pytest.mark.parametrize(("window_seconds", "batches"), [(0.0, 0), (0.5, 1), (3.5, 4), (4.0, 4)])
def test_a_run_stops_at_the_first_batch_after_its_window_closes(
    window_seconds: float, batches: int
) -> None:
    run, heap = _windowed_run(Budget(window_seconds=window_seconds))
    stopped = _sweep_heap(run, Strategy.INDEX, batch_size=10)
    assert stopped == StopReason.WINDOW_CLOSED
    assert run.result.batches == batches
    assert run.result.rows == 10 * batches
    # What it left is still there, for the next window.
    assert sum(heap.rows.values()) == len(GARBAGE) - 10 * batches


def test_a_window_that_outlasts_the_work_lets_it_finish() -> None:
    run, heap = _windowed_run(Budget(window_seconds=1000.0))
    assert _sweep_heap(run, Strategy.INDEX, batch_size=10) == StopReason.DONE
    assert not any(heap.rows.values())


@pytest.mark.parametrize(
    ("budget", "reason"),
    [
        (Budget(max_seconds=2.0, window_seconds=3.5), StopReason.MAX_SECONDS),
        (Budget(max_seconds=9.0, window_seconds=3.5), StopReason.WINDOW_CLOSED),
        (Budget(max_rows=20, window_seconds=3.5), StopReason.MAX_ROWS),
    ],
)
def test_the_first_limit_reached_names_the_stop(budget: Budget, reason: StopReason) -> None:
    run, _ = _windowed_run(budget)
    assert _sweep_heap(run, Strategy.INDEX, batch_size=10) == reason


def test_a_closed_window_leaves_a_backlog_for_the_next_window() -> None:
    assert StopReason.WINDOW_CLOSED in BUDGET_STOPS

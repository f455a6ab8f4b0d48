"""The run policy of `reaper run` (reaper.daemon.policy), with fakes: no database, no clock, no
sleep.

What the daemon does with each decision (jobs rescheduled, log lines) is tried against a real
PostgreSQL in test_daemon.py; here, only the decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from reaper.daemon.policy import (
    Backoff,
    SweepState,
    after_run,
    backoff_delay,
    dependants,
    first_run_delay,
    is_outage,
    jitter_seconds,
    order_locks,
    outage_retries,
)

BACKOFF = Backoff(first=timedelta(seconds=30), cap=timedelta(minutes=5), jitter=0.5)


@dataclass
class Run:
    """A finished run, as the policy reads it."""

    outcome: str = "success"
    stopped_by: str | None = "done"
    rows: int = 0
    error_type: str | None = None


def no_jitter(a: float, b: float) -> float:
    return a


def most_jitter(a: float, b: float) -> float:
    return b


def test_backoff_delay_doubles_up_to_the_cap() -> None:
    first, cap = timedelta(seconds=30), timedelta(minutes=5)
    delays = [backoff_delay(n, first, cap).total_seconds() for n in range(1, 8)]
    assert delays == [30, 60, 120, 240, 300, 300, 300]
    assert backoff_delay(10_000, first, cap) == cap
    assert backoff_delay(0, first, cap) == timedelta(0)


def test_a_success_keeps_the_interval_and_clears_the_failures() -> None:
    state, decision = after_run(
        SweepState(runs=3, failures=2),
        Run(),
        crashed=False,
        backoff=BACKOFF,
        dependants=("later",),
        uniform=no_jitter,
    )
    assert decision.delay is None and not decision.retry and not decision.backlog
    assert decision.pull_forward == ()  # nothing deleted: nothing to bring forward
    assert state == SweepState(runs=4, failures=0, last=Run(), next_delay=None)


def test_failures_back_off_doubling_to_the_cap_stretched_by_the_jitter() -> None:
    state = SweepState()
    delays = []
    for _ in range(6):
        state, decision = after_run(
            state,
            Run(outcome="failure", stopped_by=None),
            crashed=False,
            backoff=BACKOFF,
            dependants=(),
            uniform=no_jitter,
        )
        assert decision.retry
        delays.append(decision.delay)
    assert delays == [30, 60, 120, 240, 300, 300]
    assert state.failures == 6 and state.runs == 6 and state.next_delay == 300
    _, stretched = after_run(
        SweepState(),
        Run(outcome="failure"),
        crashed=False,
        backoff=BACKOFF,
        dependants=(),
        uniform=most_jitter,
    )
    assert stretched.delay == 45.0


def test_a_crash_counts_as_a_failure_without_a_result() -> None:
    state, decision = after_run(
        SweepState(failures=1, last=Run()),
        None,
        crashed=True,
        backoff=BACKOFF,
        dependants=("later",),
        uniform=no_jitter,
    )
    assert decision.retry and decision.delay == 60
    assert decision.pull_forward == ()
    assert state.failures == 2 and state.last is None


def test_a_run_stopped_by_its_budget_is_followed_at_once() -> None:
    for budget in ("max_rows", "max_seconds"):
        state, decision = after_run(
            SweepState(),
            Run(stopped_by=budget, rows=5000),
            crashed=False,
            backoff=BACKOFF,
            dependants=(),
            uniform=no_jitter,
        )
        assert decision.backlog and decision.delay == 0.0 and state.next_delay == 0.0
    for other in ("done", "stop"):
        _, decision = after_run(
            SweepState(),
            Run(stopped_by=other, rows=5000),
            crashed=False,
            backoff=BACKOFF,
            dependants=(),
            uniform=no_jitter,
        )
        assert not decision.backlog and decision.delay is None


def test_a_skipped_run_neither_backs_off_nor_runs_again() -> None:
    state, decision = after_run(
        SweepState(failures=3),
        Run(outcome="skipped", stopped_by=None),
        crashed=False,
        backoff=BACKOFF,
        dependants=("later",),
        uniform=no_jitter,
    )
    assert decision.delay is None and decision.pull_forward == ()
    assert state.failures == 0


def test_rows_deleted_bring_the_dependants_forward() -> None:
    after = {"requests": (), "tokens": ("requests",), "nodes": (), "late": ("requests", "x")}
    assert dependants("requests", after) == ("tokens", "late")
    assert dependants("nodes", after) == ()
    _, decision = after_run(
        SweepState(),
        Run(rows=3),
        crashed=False,
        backoff=BACKOFF,
        dependants=dependants("requests", after),
        uniform=no_jitter,
    )
    assert decision.pull_forward == ("tokens", "late")
    _, failed = after_run(
        SweepState(),
        Run(outcome="failure", rows=3),
        crashed=False,
        backoff=BACKOFF,
        dependants=("tokens",),
        uniform=no_jitter,
    )
    assert failed.pull_forward == ()


def test_outage_failures_are_retried_when_the_database_is_back() -> None:
    assert is_outage("ConnectionFailed") and is_outage("ReadOnlyDatabase")
    assert is_outage("PrivilegeMissing")
    assert not is_outage("DatabaseError") and not is_outage(None)
    states = {
        "down": SweepState(failures=2, last=Run(outcome="failure", error_type="ConnectionFailed")),
        "standby": SweepState(
            failures=1, last=Run(outcome="failure", error_type="ReadOnlyDatabase")
        ),
        "own_bug": SweepState(failures=4, last=Run(outcome="failure", error_type="DatabaseError")),
        "fine": SweepState(failures=0, last=Run()),
        "removed": SweepState(
            failures=1, last=Run(outcome="failure", error_type="ConnectionFailed")
        ),
    }
    scheduled = ["down", "standby", "own_bug", "fine"]
    assert outage_retries(states, scheduled) == ["down", "standby"]


def test_jitter_and_first_runs() -> None:
    assert jitter_seconds(timedelta(seconds=10), 0.5) == 5.0
    assert jitter_seconds(timedelta(seconds=10), 0.0) == 0.0
    assert first_run_delay(5.0, most_jitter) == 5.0
    assert first_run_delay(5.0, no_jitter) == 0.0


def test_in_process_order_locks_are_sorted_and_only_of_scheduled_sweeps() -> None:
    assert order_locks("tokens", ("requests", "gone"), ["requests", "tokens"]) == [
        "requests",
        "tokens",
    ]
    assert order_locks("a", (), ["a"]) == ["a"]

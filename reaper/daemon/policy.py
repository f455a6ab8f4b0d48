"""When each sweep of ``reaper run`` runs next: the decisions, apart from the process.

:class:`reaper.daemon.scheduler.Daemon` carries these decisions out (jobs, locks, log lines); this
module only decides, from what a run did and what the daemon remembers of the sweep. It does no I/O,
reads no clock and draws no random number of its own (the caller passes ``uniform``), so its
tests run in milliseconds with fakes and need no database.

After each run, the next one is chosen from what the run did:

- it stopped at its budget (``--max-rows-per-run`` / ``--max-seconds-per-run``) with work
  left: the next run starts at once, back to back while there is a backlog;
- it failed: retry after ``--failure-backoff``, doubled per consecutive failure, capped at
  ``--max-failure-backoff``, stretched by up to ``--jitter`` (the other sweeps keep their
  schedules);
- otherwise: the normal interval.

A run that deleted rows also brings forward the sweeps that run after it (their ``after``):
the rows it deleted may have been all that kept theirs alive (requests hold their tokens). A
run that failed because the database could not do the work (:data:`OUTAGE_ERRORS`) is retried
as soon as the database is back, rather than after its backoff.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from reaper import errors
from reaper.vocab import BUDGET_STOPS, FAILED_OUTCOMES, Outcome

# A run stopped at its budget is followed by the next one this soon: back to back.
BACKLOG_RERUN_SECONDS = 0.0
# Failures that stop every sweep, whatever its table: they make /readyz fail at once (the
# readiness probe confirms or clears it within seconds). A table's own (a missing privilege,
# a TableProblem, a TransactionConflict) fails its sweep's run only.
EVERY_SWEEP_ERRORS = (
    errors.ConnectionFailed.__name__,
    errors.ReadOnlyDatabase.__name__,
)
# Failures that say the database could not do the work (rather than one sweep's problem): the
# sweeps they failed run again as soon as the probe sees the database able to work again.
OUTAGE_ERRORS = (
    errors.ConnectionFailed.__name__,
    errors.ReadOnlyDatabase.__name__,
    errors.PrivilegeMissing.__name__,
)

# uniform(a, b): a random float in [a, b] (production: random.uniform; tests: a fake).
Uniform = Callable[[float, float], float]


class RunReport(Protocol):
    """What the policy reads of a finished run (:class:`reaper.engine.run.SweepResult` is one)."""

    @property
    def outcome(self) -> str:
        """``success``, ``failure``, ``skipped`` or ``refused`` (:class:`reaper.vocab.Outcome`)."""
        ...

    @property
    def stopped_by(self) -> str | None:
        """Why its batch loop ended (:class:`reaper.vocab.StopReason`), None when it did not
        get that far."""
        ...

    @property
    def rows(self) -> int:
        """Rows it deleted."""
        ...

    @property
    def error_type(self) -> str | None:
        """The failure's exception class name (``ConnectionFailed``), None without one."""
        ...


@dataclass(frozen=True)
class SweepState:
    """What the daemon remembers of a sweep between runs (a few fields: memory stays flat).

    Attributes:
        runs: runs finished (any outcome) since start.
        failures: consecutive failures (0 after a success).
        last: the last run's result (None before the first, and after a run that crashed).
        next_delay: seconds from the end of the last run to the next, when the policy chose
            it (backlog: 0; failure: the backoff); None when the interval decides.
    """

    runs: int = 0
    failures: int = 0
    last: RunReport | None = None
    next_delay: float | None = None


@dataclass(frozen=True)
class Backoff:
    """The settings that shape a failed sweep's retries.

    Attributes:
        first: the wait after the first failure (``--failure-backoff``).
        cap: the longest wait (``--max-failure-backoff``).
        jitter: each wait is stretched by a random 0..jitter of itself (``--jitter``).
    """

    first: timedelta
    cap: timedelta
    jitter: float


@dataclass(frozen=True)
class NextRun:
    """What the policy decided after one run.

    Attributes:
        delay: seconds from now to the sweep's next run; None when its interval decides.
        retry: the delay is a failure's backoff.
        backlog: the delay is 0 because the run stopped at its budget with work left.
        pull_forward: the sweeps to run now because this one deleted rows they wait on.
    """

    delay: float | None = None
    retry: bool = False
    backlog: bool = False
    pull_forward: tuple[str, ...] = ()


def backoff_delay(failures: int, first: timedelta, cap: timedelta) -> timedelta:
    """The wait before retrying a sweep after ``failures`` consecutive failures (>= 1):
    ``first * 2 ** (failures - 1)``, at most ``cap``; 0 for ``failures`` <= 0."""
    if failures <= 0:
        return timedelta(0)
    # 2**40 x any positive first is past any sane cap; avoids overflow for long outages.
    delay: timedelta = min(first * 2 ** min(failures - 1, 40), cap)
    return delay


def jitter_seconds(interval: timedelta, jitter: float) -> float:
    """The largest random delay added to a run of a sweep every ``interval``:
    ``jitter`` (a fraction) x interval, in seconds."""
    return interval.total_seconds() * jitter


def first_run_delay(jitter: float, uniform: Uniform) -> float:
    """Seconds from the start (or a reload that added the sweep) to a sweep's first run: a
    random 0..``jitter`` seconds, so a restart does not wait a whole interval and replicas
    started together spread out."""
    return uniform(0, jitter)


def dependants(name: str, after: Mapping[str, Iterable[str]]) -> tuple[str, ...]:
    """The sweeps that run after ``name``: those whose ``after`` (``after[sweep]``, one
    entry per scheduled sweep) names it, in ``after``'s order."""
    return tuple(later for later, first in after.items() if name in first)


def order_locks(name: str, after: Iterable[str], scheduled: Iterable[str]) -> list[str]:
    """The in-process locks a run of ``name`` holds: its own and those of the scheduled
    sweeps it runs ``after``, sorted so that two runs never wait on each other."""
    known = set(scheduled)
    return sorted({name, *(a for a in after if a in known)})


def after_run(
    state: SweepState,
    result: RunReport | None,
    *,
    crashed: bool,
    backoff: Backoff,
    dependants: Sequence[str],
    uniform: Uniform,
) -> tuple[SweepState, NextRun]:
    """Decide a sweep's next run from the run that just ended.

    Args:
        state: what was remembered of the sweep before this run.
        result: what the run did (None when it crashed without a result).
        crashed: the run raised instead of returning a result (counted as a failure).
        backoff: how long a failure waits.
        dependants: the scheduled sweeps that run after this one (:func:`dependants`).
        uniform: the random draw for the retry's jitter.

    Returns:
        The sweep's new state, and when it (and its dependants) should run next.
    """
    runs = state.runs + 1
    if crashed or (result is not None and result.outcome in FAILED_OUTCOMES):
        failures = state.failures + 1
        wait = backoff_delay(failures, backoff.first, backoff.cap).total_seconds()
        delay: float | None = wait * (1 + uniform(0, backoff.jitter))
        decision = NextRun(delay=delay, retry=True)
    else:
        failures = 0
        budget_spent = (
            result is not None
            and result.outcome == Outcome.SUCCESS
            and result.stopped_by in BUDGET_STOPS
        )
        delay = BACKLOG_RERUN_SECONDS if budget_spent else None
        decision = NextRun(delay=delay, backlog=budget_spent)
    if result is not None and result.outcome == Outcome.SUCCESS and result.rows:
        decision = dataclasses.replace(decision, pull_forward=tuple(dependants))
    new = SweepState(runs=runs, failures=failures, last=result, next_delay=delay)
    return new, decision


def stops_every_sweep(error_type: str | None) -> bool:
    """True when a run failed on what stops every sweep (the database unreachable or
    read-only), which readiness reports; False for a failure of the sweep or its table."""
    return error_type in EVERY_SWEEP_ERRORS


def is_outage(error_type: str | None) -> bool:
    """True when a run failed because the database could not do the work (unreachable,
    read-only, the role lost its privileges), not because of the sweep itself."""
    return error_type in OUTAGE_ERRORS


def outage_retries(states: Mapping[str, SweepState], scheduled: Iterable[str]) -> list[str]:
    """The database is back: the scheduled sweeps whose last run failed on the outage, to run
    again now (spread over one jitter) instead of after their backoff."""
    known = set(scheduled)
    return [
        name
        for name, state in states.items()
        if state.failures
        and state.last is not None
        and is_outage(state.last.error_type)
        and name in known
    ]

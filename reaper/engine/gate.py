"""The run's gate: before each batch, whether to stop, and how the database is doing.

One object answers for the stop signal, the budget (rows, seconds, window) and the pacer
(:mod:`reaper.engine.pacing`), so that every loop of batches asks the same question the
same way: :meth:`Gate.before_batch`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from reaper.config.sweeps import Budget
from reaper.engine.pacing import Pacer
from reaper.engine.tally import Tally
from reaper.vocab import StopReason


class Gate:
    """Says, before each batch, whether the run stops.

    Args:
        budget: when the run stops with work left.
        tally: the run's counters (the rows the budget counts, the last batch's seconds).
        clock: monotonic seconds.
        started: when the run began, on ``clock`` (the budget counts from there).
        stop: when set, the run ends after the batch in flight (None: never).
        pacer: waits while the database asks to (None: pacing off).
        between: work done between batches before the answer, outside any batch's
            measured time (the durable count: :meth:`DurableCount.tick`; None: none).

    :meth:`limits` is thread-safe (a parallel heap walk's helpers ask it); the rest is
    called by the run's own thread.
    """

    def __init__(
        self,
        budget: Budget,
        tally: Tally,
        *,
        clock: Callable[[], float],
        started: float,
        stop: threading.Event | None = None,
        pacer: Pacer | None = None,
        between: Callable[[], None] | None = None,
    ) -> None:
        self.budget, self.tally, self.clock, self.started = budget, tally, clock, started
        self.stop, self.pacer, self.between = stop, pacer, between

    def stopping(self) -> bool:
        """A stop was asked for."""
        return self.stop is not None and self.stop.is_set()

    def before_batch(self) -> StopReason | None:
        """The reason to stop before the next batch, or None to go on.

        Asked after any wait the pacer makes: a run still waiting for a standby when its
        budget ends stops with ``replica_lag``."""
        if self.between is not None:
            self.between()
        stopped = self.limits()
        if stopped is not None or self.pacer is None:
            return stopped
        budget = self.budget
        ends = [s for s in (budget.max_seconds, budget.window_seconds) if s is not None]
        deadline = self.started + min(ends) if ends else None
        return self.pacer(self.tally.last_seconds, deadline) or self.limits()

    def limits(self) -> StopReason | None:
        """The reason to stop that needs no measurement, or None.

        A stop asked for, or the row or time budget spent: what a parallel heap walk's
        helpers check before each batch."""
        if self.stopping():
            return StopReason.STOP
        budget = self.budget
        if budget.max_rows is not None and self.tally.rows >= budget.max_rows:
            return StopReason.MAX_ROWS
        elapsed = self.clock() - self.started
        if budget.max_seconds is not None and elapsed >= budget.max_seconds:
            return StopReason.MAX_SECONDS
        if budget.window_seconds is not None and elapsed >= budget.window_seconds:
            return StopReason.WINDOW_CLOSED
        return None

    def rows_left(self, in_flight: int) -> int | None:
        """Rows the budget has left beside ``in_flight`` rows of batches running (None: no
        row budget)."""
        if self.budget.max_rows is None:
            return None
        return self.budget.max_rows - self.tally.rows - in_flight

    def busy_seconds(self) -> float | None:
        """The seconds a batch aims at while other sessions use the database.

        As the load pacer's controller sets it from what they suffer (None: not busy now,
        or load pacing off)."""
        if self.pacer is None or not self.pacer.busy:
            return None
        return self.pacer.aim

    def idle(self) -> bool:
        """Whether the run may use its extra connections now.

        The pacer saw the database idle at its last measurement (:meth:`Pacer.idle`); with
        pacing off, always."""
        return self.pacer is None or self.pacer.idle()

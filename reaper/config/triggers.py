"""The daemon's triggers: a sweep's cron schedule or interval, kept inside its window, and
every job's catch-up after the clock jumps forward (:class:`CatchUp`)."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger

# A next time this far behind the clock means the clock stepped (or the process slept). Less
# is a cron time in the hour that a time change repeats, which APScheduler returns as such.
CATCH_UP_AFTER = timedelta(days=1)


class CatchUp(BaseTrigger):  # type: ignore[misc]
    """``inner``'s fire times, except that once the wall clock is more than CATCH_UP_AFTER past
    the next of them (the host's clock stepped forward, or the process was suspended), the
    next is ``now``.

    APScheduler lists a job's missed times by asking its trigger for each in turn, then runs
    one (``coalesce``): after a step of a year, a 5-second job's 6 million times took minutes
    to list, and no job ran meanwhile. Here the missed times are one, run now, and the
    schedule goes on from there.
    """

    def __init__(self, inner: BaseTrigger) -> None:
        self.inner = inner

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        when: datetime | None = self.inner.get_next_fire_time(previous_fire_time, now)
        if previous_fire_time is not None and when is not None and when < now - CATCH_UP_AFTER:
            return now
        return when

    def __str__(self) -> str:
        return str(self.inner)


def every(seconds: float) -> CatchUp:
    """A job's trigger: every ``seconds``, with :class:`CatchUp`'s catch-up."""
    return CatchUp(IntervalTrigger(seconds=seconds))


class SweepTrigger(BaseTrigger):  # type: ignore[misc]
    """When a sweep's job fires: its cron schedule (each time the clock shows, once) or its
    interval, and, with a window, a time that falls outside the window moved to the window's
    next opening ("a run due while the window is shut starts when it opens").

    Args:
        inner: the schedule's own trigger (a CronTrigger or an IntervalTrigger).
        cron: the cron schedule ``inner`` was made from (None: an interval).
        window: the sweep's window (None: any time).
    """

    def __init__(self, inner: BaseTrigger, *, cron: Any = None, window: Any = None) -> None:
        # cron: a reaper.config.schedule.Cron, window: a Window (not imported: that module
        # imports this one when it asks for a next run).
        self.inner, self.cron, self.window = inner, cron, window

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        """The next fire time after ``previous_fire_time`` (None: the first), at or after
        ``now`` as APScheduler asks."""
        prev = previous_fire_time
        when: datetime | None = CatchUp(self.inner).get_next_fire_time(prev, now)
        # A cron time in the hour that repeats fires at its first showing only.
        for _ in range(1000):
            if when is None or self.cron is None or not _second_showing(when, self.cron.zone):
                break
            when = self.inner.get_next_fire_time(when, when)
        if when is not None and self.window is not None:
            opens = self.window.next_open(when)
            if opens != when.astimezone(UTC):
                when = opens.astimezone(when.tzinfo)
        return when

    def __str__(self) -> str:
        return f"{self.inner}" + (f" in {self.window}" if self.window else "")


def _second_showing(at: datetime, zone: str) -> bool:
    """Whether ``at`` is the second time the zone's clock shows its wall time (fall back)."""
    return at.astimezone(zoneinfo.ZoneInfo(zone)).fold == 1

"""The trigger of a sweep's job: its cron schedule or interval, kept inside its window."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime
from typing import Any

from apscheduler.triggers.base import BaseTrigger


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
        when: datetime | None = self.inner.get_next_fire_time(prev, now)
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

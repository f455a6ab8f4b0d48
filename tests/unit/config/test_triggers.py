"""A job's trigger after the wall clock jumps (:class:`reaper.config.triggers.CatchUp`): the
times missed are one, run now, and the schedule goes on; with no jump the times are the
schedule's own. tests/process/daemon/test_clock_step.py steps a daemon's clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from apscheduler.triggers.base import BaseTrigger

from reaper.config.schedule import Cron
from reaper.config.triggers import SweepTrigger, every

START = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)


def missed_times(trigger: BaseTrigger, first: datetime, now: datetime) -> list[datetime]:
    """The run times a scheduler lists for a job whose next time was ``first`` at ``now``:
    APScheduler 3 asks the trigger for each in turn until one is after ``now``."""
    times, when = [], first
    while when is not None and when <= now:
        times.append(when)
        assert len(times) < 20_000, "the trigger walks every missed time"
        when = trigger.get_next_fire_time(when, now)
    return times


def test_a_year_long_step_is_one_missed_time_run_now() -> None:
    now = START + timedelta(days=365)
    assert missed_times(every(5), START, now) == [START, now]
    assert missed_times(every(5), START, START + timedelta(days=2)) == [
        START,
        START + timedelta(days=2),
    ]
    assert every(5).get_next_fire_time(now, now) == now + timedelta(seconds=5)


def test_without_a_step_the_times_are_the_intervals() -> None:
    trigger = every(5)
    assert trigger.get_next_fire_time(START, START) == START + timedelta(seconds=5)
    late = START + timedelta(seconds=1)
    assert missed_times(trigger, START, late) == [START]
    # Late by less than a day: the times missed are the schedule's (coalesce runs one).
    late = START + timedelta(seconds=21)
    assert len(missed_times(every(5), START, late)) == 5


def test_a_sweeps_cron_schedule_after_a_step_runs_once_then_keeps_its_times() -> None:
    cron = Cron("*/5 * * * *", "UTC")
    trigger = SweepTrigger(cron.trigger(), cron=cron)
    now = START + timedelta(days=365, seconds=7)
    assert missed_times(trigger, START, now) == [START, now]
    assert trigger.get_next_fire_time(now, now) == START + timedelta(days=365, minutes=5)

"""`reaper run` with schedules and windows, in-process against a real PostgreSQL, on a pinned
clock: no run starts while its window is shut, a run stops when its window closes and the next
one waits for the window to open again, a cron sweep's job fires at its times, and a reload
moves the jobs. The daemon's clock is pinned a month ahead, so the scheduler never fires a
job the test did not run itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from apscheduler.events import EVENT_JOB_EXECUTED, JobExecutionEvent
from prometheus_client import CollectorRegistry

from reaper.config.schedule import next_run
from reaper.config.settings import Settings
from reaper.daemon.scheduler import Daemon
from reaper.vocab import StopReason
from tests.support import sweeps_of
from tests.support.daemon import count, seed_routers

BERLIN = ZoneInfo("Europe/Berlin")
QUIET = {
    "jitter": "0",
    "listen": "127.0.0.1:0",
    "gauge_interval": "1h",
    "schedule_time_zone": "Europe/Berlin",
}


def berlin(day: datetime, hour: int, minute: int = 0, second: float = 0.0) -> datetime:
    """``hour:minute:second`` on ``day``'s date, on Berlin's clock, in UTC."""
    at = datetime.combine(day.date(), time(hour, minute), tzinfo=BERLIN)
    return (at + timedelta(seconds=second)).astimezone(UTC)


# A day a month ahead: the jobs' times lie past anything the scheduler would fire meanwhile.
DAY = datetime.now(UTC) + timedelta(days=30)


@pytest.fixture
def make_daemon(make_settings: Callable[..., Settings]) -> Iterator[Callable[..., Daemon]]:
    """``make_daemon(clock, **settings)``: a started Daemon of router_leases whose clock reads
    ``clock[0]`` (a test moves it); stopped after the test."""
    made: list[Daemon] = []

    def make(clock: list[datetime], **values: Any) -> Daemon:
        settings = make_settings(**{**QUIET, **values})
        daemon = Daemon(
            settings,
            [sweeps_of(settings)["router_leases"]],
            registry=CollectorRegistry(),
            now=lambda: clock[0],
        )
        made.append(daemon)
        daemon.start()
        return daemon

    yield make
    for d in made:
        d.stop(timedelta(seconds=5))


def test_no_run_starts_while_the_window_is_shut(make_daemon, conn) -> None:
    seed_routers(conn, garbage=7)
    noon = berlin(DAY, 12)
    daemon = make_daemon([noon], window="01:00-05:00", interval="10m")
    opening = berlin(DAY + timedelta(days=1), 1)
    assert daemon.next_run_time("router_leases") == opening
    # A job that fires late, after the window shut, starts no run and waits for the opening.
    assert daemon.run_sweep("router_leases") is None
    assert count(conn, "routers", "router_id", "garbage-%") == 7
    assert daemon.next_run_time("router_leases") == opening
    assert (
        daemon.metrics.registry.get_sample_value(
            "reaper_sweep_runs_total", {"sweep": "router_leases", "outcome": "success"}
        )
        == 0
    )


def test_a_run_inside_the_window_deletes_as_usual(make_daemon, conn) -> None:
    seed_routers(conn, garbage=7)
    daemon = make_daemon([berlin(DAY, 2)], window="01:00-05:00")
    result = daemon.run_sweep("router_leases")
    assert result is not None and result.stopped_by == StopReason.DONE and result.rows == 7
    assert count(conn, "routers", "router_id", "garbage-%") == 0
    assert count(conn, "routers", "router_id", "keep-%") == 3


def test_a_run_stops_when_its_window_closes_and_resumes_when_it_opens(make_daemon, conn) -> None:
    seed_routers(conn, garbage=7)
    # The window closes a microsecond after the run starts: it stops before its first batch.
    clock = [berlin(DAY, 4, 59, 59.999999)]
    daemon = make_daemon(clock, window="01:00-05:00", batch_size="2", strategy="index")
    result = daemon.run_sweep("router_leases")
    assert result is not None and result.outcome == "success"
    assert result.stopped_by == StopReason.WINDOW_CLOSED and result.rows == 0
    assert count(conn, "routers", "router_id", "garbage-%") == 7
    # What the scheduler does after the run, the window now shut: the backlog waits for the
    # next opening (not the back-to-back run a spent budget gets).
    clock[0] = berlin(DAY, 5, 0, 0.05)
    daemon._job_done(
        JobExecutionEvent(EVENT_JOB_EXECUTED, "router_leases", None, berlin(DAY, 4), retval=result)
    )
    assert daemon.next_run_time("router_leases") == berlin(DAY + timedelta(days=1), 1)


def test_a_cron_sweep_fires_at_its_next_time_without_jitter(make_daemon) -> None:
    before = datetime.now(UTC)
    daemon = make_daemon([berlin(DAY, 12)], schedule="0 3 * * *", jitter="0.5")
    sweep = daemon.sweeps["router_leases"]
    assert sweep.schedule is not None
    assert daemon.jitter_seconds(sweep) == 0.0
    # The scheduler takes a cron job's first time from its own clock (the wall clock).
    expected = next_run(before, cron=sweep.schedule, window=None)
    assert expected is not None
    assert daemon.next_run_time("router_leases") == expected
    assert expected.astimezone(BERLIN).strftime("%H:%M") == "03:00"


def test_a_reload_moves_the_job_into_the_new_window_and_back(make_daemon, make_settings) -> None:
    daemon = make_daemon([berlin(DAY, 12)], interval="1h")
    # A window whose opening lies hours from the wall clock, where the scheduler computes.
    start = (datetime.now(BERLIN) + timedelta(hours=3)).strftime("%H:00")
    end = (datetime.now(BERLIN) + timedelta(hours=4)).strftime("%H:00")
    windowed = make_settings(**{**QUIET, "window": f"{start}-{end}", "interval": "1h"})
    before = datetime.now(UTC)
    daemon.apply(windowed, [sweeps_of(windowed)["router_leases"]])
    window = daemon.sweeps["router_leases"].window
    assert window is not None
    assert daemon.next_run_time("router_leases") == window.next_open(before + timedelta(hours=1))
    # And back: no window, the next run an interval from the reload.
    plain = make_settings(**{**QUIET, "interval": "1h"})
    before = datetime.now(UTC)
    daemon.apply(plain, [sweeps_of(plain)["router_leases"]])
    nxt = daemon.next_run_time("router_leases")
    assert nxt is not None
    assert before + timedelta(hours=1) <= nxt <= datetime.now(UTC) + timedelta(hours=1)


@pytest.mark.parametrize(
    ("at", "left"),
    [
        # Berlin goes forward on 28 March 2027 (02:00 -> 03:00)...
        (datetime(2027, 3, 28, 0, 30, tzinfo=BERLIN), timedelta(hours=3, minutes=30)),
        (datetime(2027, 3, 28, 3, 30, tzinfo=BERLIN), timedelta(hours=1, minutes=30)),
        # ... and back on 31 October 2027 (03:00 -> 02:00): the repeated hour counts twice.
        (datetime(2027, 10, 31, 1, 30, tzinfo=BERLIN), timedelta(hours=4, minutes=30)),
        (datetime(2027, 10, 31, 2, 30, fold=1, tzinfo=BERLIN), timedelta(hours=2, minutes=30)),
    ],
    ids=["spring-before", "spring-after", "autumn-before", "autumn-repeated"],
)
def test_a_run_on_the_night_the_clocks_change_ends_with_the_real_window(
    make_daemon, at: datetime, left: timedelta
) -> None:
    """A run's deadline is the window's end in real time: across the change, an hour less
    (spring) or more (autumn) than the wall clock's difference."""
    daemon = make_daemon([at.astimezone(UTC)], window="00:00-05:00", interval="10m")
    budget = daemon._run_budget(daemon.sweeps["router_leases"])
    assert budget is not None and budget.window_seconds == left.total_seconds()

"""Schedules and windows on a pinned clock: cron times, daily windows, and the nights the
clocks change (Europe/Berlin, America/New_York, Australia/Lord_Howe's half hour), as
docs/daemon.md states them. No test waits on the wall clock."""

from __future__ import annotations

import tomllib
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.interval import IntervalTrigger

from reaper.config.schedule import Cron, Window, next_run, parse_window
from reaper.config.settings import build_settings
from reaper.config.sweeps import Sweep, configured_sweeps
from reaper.config.triggers import SweepTrigger
from reaper.errors import ConfigError

BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local(zone: str, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=ZoneInfo(zone), fold=fold)


def window(text: str, zone: str = "UTC") -> Window:
    start, end = parse_window(text)
    return Window(start, end, zone)


def fires(trigger: SweepTrigger, start: datetime, until: datetime) -> list[datetime]:
    """Every fire time of ``trigger`` from ``start`` to ``until``, as the scheduler asks."""
    out: list[datetime] = []
    prev = None
    now = start
    while True:
        when = trigger.get_next_fire_time(prev, now)
        if when is None or when > until:
            return out
        out.append(when.astimezone(UTC))
        prev = now = when


# -- windows ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "spring", "autumn"),
    [(BERLIN, (2026, 3, 29), (2026, 10, 25)), (NEW_YORK, (2026, 3, 8), (2026, 11, 1))],
)
def test_a_window_over_the_change_is_an_hour_shorter_in_spring_and_longer_in_autumn(
    zone: str, spring: tuple[int, int, int], autumn: tuple[int, int, int]
) -> None:
    w = window("01:00-05:00", zone)
    day_before = datetime(*spring).date() - timedelta(days=1)
    opens, closes = w.span(day_before)
    assert closes - opens == timedelta(hours=4)
    opens, closes = w.span(datetime(*spring).date())
    assert (opens, closes) == (
        local(zone, *spring, 1).astimezone(UTC),
        local(zone, *spring, 5).astimezone(UTC),
    )
    assert closes - opens == timedelta(hours=3)
    opens, closes = w.span(datetime(*autumn).date())
    assert closes - opens == timedelta(hours=5)
    # Open all through the repeated hour, both showings of it.
    for fold in (0, 1):
        assert w.is_open(local(zone, *autumn, 1, 30, fold=fold))
    assert not w.is_open(local(zone, *autumn, 5, 0))


def test_a_window_inside_the_skipped_hour_opens_later_by_the_jump() -> None:
    """02:00-02:30 in Berlin, on the night 02:00 becomes 03:00: open 03:00-03:30 new time."""
    w = window("02:00-02:30", BERLIN)
    opens, closes = w.span(datetime(2026, 3, 29).date())
    assert (opens, closes) == (
        local(BERLIN, 2026, 3, 29, 3, 0).astimezone(UTC),
        local(BERLIN, 2026, 3, 29, 3, 30).astimezone(UTC),
    )
    assert w.is_open(local(BERLIN, 2026, 3, 29, 3, 10))
    assert not w.is_open(local(BERLIN, 2026, 3, 29, 3, 40))


def test_a_window_that_starts_in_the_skipped_hour_and_ends_after_it_stays_shut_that_night() -> None:
    w = window("02:30-03:15", BERLIN)
    night = datetime(2026, 3, 29).date()
    opens, closes = w.span(night)
    assert opens == closes
    at = local(BERLIN, 2026, 3, 29, 0, 0)
    # The next opening is the night after, at 02:30.
    assert w.next_open(at) == local(BERLIN, 2026, 3, 30, 2, 30).astimezone(UTC)
    assert not any(w.is_open(at + timedelta(minutes=m)) for m in range(0, 24 * 60, 5))


def test_a_window_in_the_repeated_hour_opens_once() -> None:
    """02:00-02:30 in Berlin on the night 03:00 becomes 02:00: open at its first showing."""
    w = window("02:00-02:30", BERLIN)
    first = local(BERLIN, 2026, 10, 25, 2, 10, fold=0)
    second = local(BERLIN, 2026, 10, 25, 2, 10, fold=1)
    assert w.is_open(first)
    assert not w.is_open(second)
    assert w.closes_at(first) == local(BERLIN, 2026, 10, 25, 2, 30, fold=0).astimezone(UTC)
    assert w.next_open(second) == local(BERLIN, 2026, 10, 26, 2, 0).astimezone(UTC)


def test_a_half_hour_change_moves_a_window_by_half_an_hour() -> None:
    """Lord Howe Island goes forward 30 minutes at 02:00 (2026-10-04)."""
    w = window("02:00-02:20", "Australia/Lord_Howe")
    opens, closes = w.span(datetime(2026, 10, 4).date())
    zone = ZoneInfo("Australia/Lord_Howe")
    assert opens.astimezone(zone).strftime("%H:%M") == "02:30"
    assert closes - opens == timedelta(minutes=20)


def test_an_overnight_window_spans_midnight() -> None:
    w = window("22:00-04:00", BERLIN)
    assert w.is_open(local(BERLIN, 2026, 6, 1, 23, 0))
    assert w.is_open(local(BERLIN, 2026, 6, 2, 3, 59))
    assert not w.is_open(local(BERLIN, 2026, 6, 2, 4, 0))
    assert w.closes_at(local(BERLIN, 2026, 6, 1, 23)) == local(BERLIN, 2026, 6, 2, 4).astimezone(
        UTC
    )
    assert w.next_open(local(BERLIN, 2026, 6, 2, 12)) == local(BERLIN, 2026, 6, 2, 22).astimezone(
        UTC
    )
    # Across the spring change: 22:00 to 04:00 is 5 hours that night.
    opens, closes = w.span(datetime(2026, 3, 28).date())
    assert closes - opens == timedelta(hours=5)


@pytest.mark.parametrize(
    "text",
    [
        "01:00",
        "25:00-05:00",
        "01:00-01:00",
        "1-5",
        "1:00-5:00",
        "01:00-24:00",
        "01:00-05:00 Europe/Berlin",
    ],
)
def test_a_window_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="window"):
        parse_window(text)


# -- cron schedules --------------------------------------------------------------------


def test_a_cron_time_fires_daily_at_its_local_time() -> None:
    cron = Cron("0 3 * * *", BERLIN)
    got = fires(SweepTrigger(cron.trigger(), cron=cron), utc(2026, 6, 1), utc(2026, 6, 4))
    assert [g.astimezone(ZoneInfo(BERLIN)).strftime("%d %H:%M") for g in got] == [
        "01 03:00",
        "02 03:00",
        "03 03:00",
    ]


def test_a_cron_time_the_clock_skips_fires_later_by_the_jump() -> None:
    cron = Cron("30 2 * * *", BERLIN)
    got = fires(SweepTrigger(cron.trigger(), cron=cron), utc(2026, 3, 28), utc(2026, 3, 31))
    assert [g.astimezone(ZoneInfo(BERLIN)).strftime("%d %H:%M %Z") for g in got] == [
        "28 02:30 CET",
        "29 03:30 CEST",
        "30 02:30 CEST",
    ]


@pytest.mark.parametrize("expression", ["30 2 * * *", "*/20 1-3 * * *", "0 * * * *"])
def test_a_cron_time_the_clock_shows_twice_fires_once(expression: str) -> None:
    cron = Cron(expression, BERLIN)
    got = fires(
        SweepTrigger(cron.trigger(), cron=cron), utc(2026, 10, 24, 12), utc(2026, 10, 25, 12)
    )
    walls = [g.astimezone(ZoneInfo(BERLIN)).strftime("%H:%M") for g in got]
    assert len(walls) == len(set(walls)), walls
    assert "02:30" in walls or "02:00" in walls


def test_next_run_of_a_cron_inside_a_window_waits_for_the_window() -> None:
    cron, w = Cron("*/30 * * * *", NEW_YORK), window("01:00-02:00", NEW_YORK)
    at = local(NEW_YORK, 2026, 6, 1, 12, 10)
    assert next_run(at, cron=cron, window=w) == local(NEW_YORK, 2026, 6, 2, 1, 0).astimezone(UTC)
    at = local(NEW_YORK, 2026, 6, 2, 1, 10)
    assert next_run(at, cron=cron, window=w) == local(NEW_YORK, 2026, 6, 2, 1, 30).astimezone(UTC)


def test_an_interval_inside_a_window_fires_only_while_it_is_open() -> None:
    w = window("01:00-05:00", BERLIN)
    inner = IntervalTrigger(hours=1, start_date=utc(2026, 3, 27, 12, 17), timezone=UTC)
    got = fires(SweepTrigger(inner, window=w), utc(2026, 3, 27, 12, 17), utc(2026, 3, 30, 12))
    assert got and all(w.is_open(g) for g in got)
    berlin = [g.astimezone(ZoneInfo(BERLIN)).strftime("%d %H:%M") for g in got]
    # Each night: at the opening, then hourly from there, none at or after the close.
    assert berlin == [
        "28 01:00",
        "28 02:00",
        "28 03:00",
        "28 04:00",
        "29 01:00",
        "29 03:00",
        "29 04:00",  # 02:00 never shows that night
        "30 01:00",
        "30 02:00",
        "30 03:00",
        "30 04:00",
    ]


# -- resolution of the settings into the sweeps ----------------------------------------


def sweeps(toml: dict[str, object], **flags: str) -> dict[str, Sweep]:
    settings = build_settings({"dsn": "postgresql://x@127.0.0.1:1/x", **flags}, toml)
    return {s.name: s for s in configured_sweeps(settings)}


def test_a_sweep_takes_its_own_schedule_and_window_else_the_global_ones() -> None:
    got = sweeps(
        {
            "schedule": "0 3 * * *",
            "window": "01:00-05:00",
            "schedule_time_zone": BERLIN,
            "sweeps": {
                "nodes_silent": {"interval": "30m"},
                "router_leases": {
                    "schedule": "15 2 * * sat,sun",
                    "window": "22:00-04:00",
                    "schedule_time_zone": NEW_YORK,
                },
            },
        }
    )
    assert got["nodes_session"].schedule == Cron("0 3 * * *", BERLIN)
    assert got["nodes_session"].window == Window(time(1), time(5), BERLIN)
    # Its own interval wins over the global schedule; the global window still holds.
    assert got["nodes_silent"].schedule is None
    assert got["nodes_silent"].interval == timedelta(minutes=30)
    assert got["nodes_silent"].window == Window(time(1), time(5), BERLIN)
    assert got["router_leases"].schedule == Cron("15 2 * * sat,sun", NEW_YORK)
    assert got["router_leases"].window == Window(time(22), time(4), NEW_YORK)


def test_any_time_takes_a_sweep_out_of_the_global_window() -> None:
    got = sweeps(
        {
            "window": "01:00-05:00",
            "sweeps": {"nodes_ephemeral": {"window": "any"}, "router_leases": {"window": ""}},
        }
    )
    assert got["nodes_ephemeral"].window is None
    assert got["router_leases"].window == Window(time(1), time(5))  # "": the global one
    assert sweeps({"window": "any"})["nodes_silent"].window is None


def test_no_schedule_and_no_window_by_default() -> None:
    got = sweeps({})
    assert all(s.schedule is None and s.window is None for s in got.values())


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        ({"schedule": "0 3 * * *", "interval": "1h"}, ["interval", "schedule", "give one"]),
        (
            {"sweeps": {"nodes_silent": {"schedule": "0 3 * * *", "interval": "1h"}}},
            ["[sweeps.nodes_silent]", "interval", "schedule", "give one"],
        ),
    ],
)
def test_an_interval_and_a_schedule_together_are_refused(
    toml: dict[str, object], words: list[str]
) -> None:
    with pytest.raises(ConfigError) as exc:
        sweeps(toml)
    assert "\n" not in str(exc.value)
    for w in words:
        assert w in str(exc.value)


# -- what docs/daemon.md says ----------------------------------------------------------

DOCS = Path(__file__).resolve().parents[3] / "docs" / "daemon.md"


def test_the_time_change_table_of_the_docs_holds() -> None:
    """docs/daemon.md's table, Europe/Berlin in 2026, row by row."""
    spring, autumn = datetime(2026, 3, 29).date(), datetime(2026, 10, 25).date()

    def hours(text: str, day: date) -> float:
        opens, closes = window(text, BERLIN).span(day)
        return (closes - opens) / timedelta(hours=1)

    assert (hours("01:00-05:00", spring), hours("01:00-05:00", autumn)) == (3, 5)
    assert window("02:00-02:30", BERLIN).span(spring)[0] == local(
        BERLIN, 2026, 3, 29, 3, 0
    ).astimezone(UTC)
    assert window("02:00-02:30", BERLIN).span(autumn)[0] == local(
        BERLIN, 2026, 10, 25, 2, 0, fold=0
    ).astimezone(UTC)
    assert (hours("02:30-03:15", spring), hours("02:30-03:15", autumn)) == (0, 1.75)
    cron = Cron("30 2 * * *", BERLIN)
    trigger = SweepTrigger(cron.trigger(), cron=cron)
    assert fires(trigger, utc(2026, 3, 28, 12), utc(2026, 3, 29, 12)) == [
        local(BERLIN, 2026, 3, 29, 3, 30).astimezone(UTC)
    ]
    assert fires(trigger, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12)) == [
        local(BERLIN, 2026, 10, 25, 2, 30, fold=0).astimezone(UTC)
    ]


def test_the_example_of_the_docs_loads_as_it_says() -> None:
    text = DOCS.read_text("utf-8")
    block = text.split("**Schedules and windows.**", 1)[1].split("```toml\n", 1)[1]
    got = sweeps(tomllib.loads(block.split("```", 1)[0]))
    assert got["nodes_ephemeral"].interval == timedelta(minutes=2)
    assert got["nodes_ephemeral"].window == Window(time(1), time(5), BERLIN)
    assert got["router_leases"].schedule == Cron("0 3 * * sat,sun", BERLIN)
    assert got["nodes_silent"].window == Window(time(22), time(4), BERLIN)
    assert got["nodes_silent"].schedule is None
    assert got["enrollment_requests_ephemeral"].window is None
    assert got["enrollment_requests_ephemeral"].window is None


def test_the_example_and_the_error_of_the_configuration_page_are_true() -> None:
    text = (DOCS.parent / "configuration.md").read_text("utf-8")
    section = text.split("When the daemon runs each sweep", 1)[1]
    got = sweeps(tomllib.loads(section.split("```toml\n", 1)[1].split("```", 1)[0]))
    assert got["router_leases"].schedule == Cron("30 1 * * mon-fri", NEW_YORK)
    assert got["router_leases"].window == Window(time(1), time(5), NEW_YORK)
    quoted = " ".join(section.split("`reaper: ", 1)[1].split("`.", 1)[0].split())
    with pytest.raises(ConfigError) as exc:
        build_settings({}, {"schedule": "0 3 * * 8"}, source="reaper.toml")
    assert str(exc.value) == quoted

"""`reaper status`'s next run and window per sweep, on a pinned clock: a cron time, an
interval, a window open or shut (and what the table prints of them)."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from rich.console import Console

from reaper.commands import render
from reaper.commands.status import SweepStatus, timing
from reaper.config.settings import build_settings
from reaper.config.sweeps import Sweep, configured_sweeps


def sweeps(toml: dict[str, object]) -> dict[str, Sweep]:
    settings = build_settings({"dsn": "postgresql://x@127.0.0.1:1/x"}, toml)
    return {s.name: s for s in configured_sweeps(settings)}


CONFIG = {
    "schedule_time_zone": "Europe/Berlin",
    "window": "01:00-05:00",
    "sweeps": {
        "router_leases": {"schedule": "0 3 * * *"},
        "nodes_silent": {"window": "22:00-23:00"},
    },
}


def status_at(sweep: Sweep, at: datetime) -> SweepStatus:
    st = SweepStatus(sweep.name, str(sweep.table), sweep.reason, backlog_rows=0)
    timing(st, sweep, at)
    return st


def test_a_shut_window_names_its_opening_as_the_next_run() -> None:
    noon = datetime(2026, 12, 1, 11, 0, tzinfo=UTC)  # 12:00 in Berlin
    by = sweeps(CONFIG)
    st = status_at(by["nodes_session"], noon)
    assert st.schedule == "every 1h" and st.window == "01:00-05:00" and st.zone == "Europe/Berlin"
    assert st.window_open is False
    assert st.next_run == st.window_changes == datetime(2026, 12, 2, 0, 0, tzinfo=UTC)
    cron = status_at(by["router_leases"], noon)
    assert cron.schedule == "0 3 * * *"
    assert cron.next_run == datetime(2026, 12, 2, 2, 0, tzinfo=UTC)  # 03:00 in Berlin
    assert cron.as_dict()["next_run"] == "2026-12-02T02:00:00+00:00"
    assert cron.as_dict()["window_open"] is False
    assert cron.as_dict()["schedule_source"] == "this command's settings"


def test_an_open_window_names_its_close() -> None:
    at = datetime(2026, 12, 1, 1, 30, tzinfo=UTC)  # 02:30 in Berlin
    st = status_at(sweeps(CONFIG)["nodes_session"], at)
    assert st.window_open is True
    assert st.window_changes == datetime(2026, 12, 1, 4, 0, tzinfo=UTC)
    assert st.next_run is None  # an interval sweep inside its window: the daemon's timing


def test_no_window_no_schedule() -> None:
    st = status_at(sweeps({})["nodes_ephemeral"], datetime(2026, 12, 1, tzinfo=UTC))
    assert (st.schedule, st.next_run, st.window, st.window_open) == ("every 5m", None, None, None)


@pytest.mark.parametrize("with_window", [True, False])
def test_the_table_shows_the_next_run_and_the_window(monkeypatch, with_window: bool) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    noon = datetime(2026, 12, 1, 11, 0, tzinfo=UTC)
    by = sweeps(CONFIG if with_window else {})
    rows = [status_at(s, noon) for s in by.values()]
    out = io.StringIO()
    monkeypatch.setattr(
        render, "make_console", lambda: Console(file=out, width=200, color_system=None)
    )
    render.print_status(rows)
    text = out.getvalue()
    # What status cannot know it does not state: the schedule is this command's settings'.
    assert "next run" not in text and "schedule" in text
    assert "schedule: from this command's settings" in text
    assert "a running `reaper run` keeps the settings it started with" in text
    if with_window:
        assert "2026-12-02 03:00 CET" in text  # router_leases, on Berlin's clock
        assert "01:00-05:00 closed until 01:00" in text
        assert "22:00-23:00 closed until 22:00" in text
    else:
        table = text[: text.index("schedule: from")]
        assert "window" not in table and "every 1h" in text and "every 5m" in text

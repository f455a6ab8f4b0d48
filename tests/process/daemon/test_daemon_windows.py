"""`reaper run` with a window from the config file: no sweep runs while it is shut, SIGHUP
opens it (the garbage goes), and a bad schedule on reload is one line and changes nothing."""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from tests.support.daemon import (
    count,
    free_port,
    seed_routers,
    start_reaper,
    wait_for,
)


def hours_from_now(first: int, last: int) -> str:
    """A window from the hour ``first`` hours from now to the hour ``last`` hours from now."""
    now = datetime.now(UTC)
    return f"{(now + timedelta(hours=first)):%H}:00-{(now + timedelta(hours=last)):%H}:00"


def test_a_shut_window_holds_the_sweeps_and_sighup_opens_it(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    seed_routers(conn, garbage=9)
    config = tmp_path / "reaper.toml"
    config.write_text(f'window = "{hours_from_now(3, 4)}"\n')
    reaper = start_reaper(
        [
            "run",
            "--dsn",
            dsn,
            "--config",
            str(config),
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--interval",
            "1s",
            "--jitter",
            "0",
            "--check-interval",
            "0",
        ],
        tmp_path,
    )
    started = wait_for("daemon_started", lambda: reaper.events("daemon_started"))
    assert started[0]["sweeps"]["router_leases"] == f"1s in {hours_from_now(3, 4)} (UTC)"
    wait_for("database_ready", lambda: reaper.events("database_ready"))

    # A bad schedule is refused in one line; the window stays shut.
    config.write_text(f'window = "{hours_from_now(3, 4)}"\nschedule = "0 3 * * 8"\n')
    reaper.proc.send_signal(signal.SIGHUP)
    rejected = wait_for("reload_rejected", lambda: reaper.events("reload_rejected"))
    assert "schedule" in rejected[0]["error"] and "\n" not in rejected[0]["error"]
    assert not reaper.events("sweep_finished")
    assert count(conn, "routers", "router_id", "garbage-%") == 9

    config.write_text(f'window = "{hours_from_now(-1, 2)}"\n')
    reaper.proc.send_signal(signal.SIGHUP)
    wait_for("settings_reloaded", lambda: reaper.events("settings_reloaded"))
    wait_for(
        "the leases swept once the window is open",
        lambda: count(conn, "routers", "router_id", "garbage-%") == 0,
    )
    assert count(conn, "routers", "router_id", "keep-%") == 3
    assert reaper.terminate() == 0

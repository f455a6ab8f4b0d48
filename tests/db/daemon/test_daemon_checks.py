"""`reaper run` and the checks at startup and on a schedule (logged, exported as
reaper_check_failures, --strict refusing the start) and SIGHUP reloading the config file."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from reaper.config.load import reload_config
from reaper.config.settings import Settings
from reaper.daemon.scheduler import Daemon
from tests.db.daemon.test_daemon import make_daemon, value
from tests.support.daemon import (
    count,
    seed_routers,
    wait_for,
)
from tests.support.ops import spec

__all__ = ["make_daemon"]  # a fixture, used by name


def failures(daemon: Daemon, sweep: str, check: str) -> float:
    return value(daemon, "reaper_check_failures", sweep=sweep, check=check)


@pytest.mark.fresh_db
def test_checks_run_at_startup_and_on_schedule(
    make_daemon: Callable[..., Daemon], conn: psycopg.Connection[Any]
) -> None:
    conn.execute("DROP INDEX nodes_session_expires_at_idx")
    daemon = make_daemon(sweeps=["nodes_session", "router_leases"], check_interval="1s")
    # The gauge is set a moment before the findings are kept: wait for both.
    wait_for(
        "the failing index check",
        lambda: failures(daemon, "nodes_session", "index") == 1 and daemon.findings is not None,
    )
    assert failures(daemon, "router_leases", "index") == 0
    assert failures(daemon, "*", "advisory_lock") == 0
    assert daemon.findings is not None
    # (The daemon connects as the tests' superuser, which fails the role check.)
    assert [
        (f.sweep, f.check, f.subject) for f in daemon.findings if f.failed and f.check != "role"
    ] == [("nodes_session", "index", "nodes_session_expires_at_idx")]
    # Repaired while the daemon runs: the next scheduled check clears the gauge.
    conn.execute(spec("nodes_session_expires_at_idx").statement)
    wait_for("the repaired index", lambda: failures(daemon, "nodes_session", "index") == 0)


def test_reload_changes_retention_budget_interval_and_sweeps(
    make_daemon: Callable[..., Daemon],
    make_settings: Callable[..., Settings],
    conn: psycopg.Connection[Any],
    tmp_path: Path,
) -> None:
    seed_routers(conn, garbage=30, age="20 days")  # inside the 30-day retention
    daemon = make_daemon(sweeps=None, start=True)
    # Each sweep runs once at start (jitter 0): wait for that run, so that none is in flight
    # beside the runs below.
    first = wait_for("the first run", lambda: daemon.state("router_leases").last)
    assert first.rows == 0
    dsn = str(daemon.settings.dsn)
    explicit = {"dsn": dsn, "jitter": "0", "listen": "127.0.0.1:0", "gauge_interval": "1h"}
    config = tmp_path / "reaper.toml"
    config.write_text(
        'node_retention = "10d"\nmax_rows_per_run = 10\nbatch_size = 5\ninterval = "2h"\n'
        "[sweeps.nodes_ephemeral]\nenabled = false\n"
    )

    def load() -> tuple[Settings, list[Any]]:
        new = reload_config(config, explicit)
        return new.settings, new.enabled()

    started = value(daemon, "reaper_config_last_reload_success_timestamp_seconds")
    assert value(daemon, "reaper_config_last_reload_successful") == 1 and started > 0
    assert daemon.reload(load) is True
    reloaded = value(daemon, "reaper_config_last_reload_success_timestamp_seconds")
    assert value(daemon, "reaper_config_last_reload_successful") == 1 and reloaded >= started
    assert "nodes_ephemeral" not in daemon.sweeps
    assert daemon.settings.node_retention.days == 10
    next_run = daemon.next_run_time("router_leases")
    # The interval went from 1h to 2h: the next run is more than an hour and a half away.
    assert next_run is not None
    assert (next_run - datetime.now(UTC)).total_seconds() > 5400
    result = daemon.run_sweep("router_leases")
    # The new retention makes the leases garbage; the new budget stops the run after 10 rows
    # (two batches of the new batch size).
    assert result is not None and (result.rows, result.stopped_by) == (10, "max_rows")
    assert count(conn, "routers", "router_id", "garbage-%") == 20

    config.write_text('node_retention = "soon"\n')
    assert daemon.reload(load) is False
    assert daemon.settings.node_retention.days == 10  # the running settings stay
    # Prometheus's own convention: the last reload failed, the last good one's time stays.
    assert value(daemon, "reaper_config_last_reload_successful") == 0
    assert value(daemon, "reaper_config_last_reload_success_timestamp_seconds") == reloaded
    assert "nodes_ephemeral" not in daemon.sweeps

"""`reaper run` and the checks at startup and on a schedule (logged, exported as
reaper_check_failures, --strict refusing the start) and SIGHUP reloading the config file."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from reaper.config.load import reload_config
from reaper.config.settings import Settings
from reaper.daemon.scheduler import Daemon
from tests.daemon_helpers import (
    count,
    free_port,
    kill_leftovers,
    seed_routers,
    start_reaper,
    wait_for,
)
from tests.ops_helpers import apply_grants, spec
from tests.test_daemon import make_daemon, value

__all__ = ["make_daemon"]  # a fixture, used by name

pytestmark = pytest.mark.db


@pytest.fixture(autouse=True)
def _no_process_left() -> Iterator[None]:
    yield
    kill_leftovers()


def failures(daemon: Daemon, sweep: str, check: str) -> float:
    return value(daemon, "reaper_check_failures", sweep=sweep, check=check)


def test_checks_run_at_startup_and_on_schedule(
    make_daemon: Callable[..., Daemon], conn: psycopg.Connection[Any]
) -> None:
    conn.execute("DROP INDEX nodes_session_expires_at_idx")
    daemon = make_daemon(sweeps=["nodes_session", "router_leases"], check_interval="1s")
    # The gauge is set a moment before the findings are kept: wait for both.
    wait_for("the failing index check", lambda: failures(daemon, "nodes_session", "index") == 1
             and daemon.findings is not None)
    assert failures(daemon, "router_leases", "index") == 0
    assert failures(daemon, "*", "advisory_lock") == 0
    assert daemon.findings is not None
    # (The daemon connects as the tests' superuser, which fails the role check.)
    assert [(f.sweep, f.check, f.subject) for f in daemon.findings
            if f.failed and f.check != "role"] == [
        ("nodes_session", "index", "nodes_session_expires_at_idx")
    ]
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

    assert daemon.reload(load) is True
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
    assert "nodes_ephemeral" not in daemon.sweeps


def _config(path: Path, retention: str) -> None:
    path.write_text(f'node_retention = "{retention}"\n')


def test_sighup_reloads_and_rejects_a_bad_file_in_one_line(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    seed_routers(conn, garbage=25, age="40 days")
    config = tmp_path / "reaper.toml"
    _config(config, "60d")
    reaper = start_reaper(
        ["run", "--dsn", dsn, "--config", str(config), "--listen", f"127.0.0.1:{free_port()}",
         "--interval", "1s", "--jitter", "0", "--check-interval", "0"],
        tmp_path,
    )
    wait_for("a first run of router_leases", lambda: any(
        e["sweep"] == "router_leases" for e in reaper.events("sweep_finished")
    ))
    assert count(conn, "routers", "router_id", "garbage-%") == 25

    _config(config, "30d")
    reaper.proc.send_signal(signal.SIGHUP)
    reloaded = wait_for("settings_reloaded", lambda: reaper.events("settings_reloaded"))
    assert reloaded[0]["changed"] == ["node_retention"]
    wait_for("the leases swept under the new retention",
             lambda: count(conn, "routers", "router_id", "garbage-%") == 0)

    config.write_text("node_retention = \n")
    reaper.proc.send_signal(signal.SIGHUP)
    rejected = wait_for("reload_rejected", lambda: reaper.events("reload_rejected"))
    assert len(rejected) == 1 and "is not valid TOML" in rejected[0]["error"]
    assert "\n" not in rejected[0]["error"]
    # Still running on the settings it had: it sweeps new garbage past 30 days.
    seed_routers(conn, garbage=5, age="35 days", prefix="later-")
    wait_for("later garbage swept",
             lambda: count(conn, "routers", "router_id", "later-garbage-%") == 0)
    assert reaper.proc.poll() is None
    assert reaper.terminate() == 0


def test_strict_refuses_to_start_on_a_failed_check(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    seed_routers(conn, garbage=5)
    conn.execute("DROP INDEX routers_lease_expires_at_idx")
    reaper = start_reaper(
        ["run", "--dsn", apply_grants(dsn), "--strict", "--listen", f"127.0.0.1:{free_port()}",
         "--jitter", "0"],
        tmp_path,
    )
    assert reaper.proc.wait(timeout=60) == 1
    last = reaper.log_path.read_text().strip().splitlines()[-1]
    assert last.startswith("reaper: --strict: 1 check(s) failed, first: router_leases index "
                           "routers_lease_expires_at_idx")
    failed = reaper.events("check_failed")
    assert [(e["sweep"], e["check"]) for e in failed] == [("router_leases", "index")]
    assert reaper.events("sweep_finished") == []
    assert count(conn, "routers", "router_id", "garbage-%") == 5


def test_strict_starts_when_every_check_passes(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    seed_routers(conn, garbage=5)
    reaper = start_reaper(
        ["run", "--dsn", apply_grants(dsn), "--strict", "--listen", f"127.0.0.1:{free_port()}",
         "--jitter", "0", "--interval", "1s"],
        tmp_path,
    )
    wait_for("the garbage swept", lambda: count(conn, "routers", "router_id", "garbage-%") == 0)
    assert reaper.events("checks_finished")[0]["failed"] == 0
    assert reaper.terminate() == 0

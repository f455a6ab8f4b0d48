"""`reaper run` and the checks at startup and on a schedule (logged, exported as
reaper_check_failures, --strict refusing the start) and SIGHUP reloading the config file."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.db.daemon.test_daemon import make_daemon
from tests.support.daemon import (
    count,
    free_port,
    seed_routers,
    start_reaper,
    wait_for,
)
from tests.support.ops import apply_grants

__all__ = ["make_daemon"]  # a fixture, used by name


def _config(path: Path, retention: str) -> None:
    path.write_text(f'node_retention = "{retention}"\n')


def test_sighup_reloads_and_rejects_a_bad_file_in_one_line(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    seed_routers(conn, garbage=25, age="40 days")
    config = tmp_path / "reaper.toml"
    _config(config, "60d")
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
    wait_for(
        "a first run of router_leases",
        lambda: any(e["sweep"] == "router_leases" for e in reaper.events("sweep_finished")),
    )
    assert count(conn, "routers", "router_id", "garbage-%") == 25

    _config(config, "30d")
    reaper.proc.send_signal(signal.SIGHUP)
    reloaded = wait_for("settings_reloaded", lambda: reaper.events("settings_reloaded"))
    assert reloaded[0]["changed"] == ["node_retention"]
    wait_for(
        "the leases swept under the new retention",
        lambda: count(conn, "routers", "router_id", "garbage-%") == 0,
    )

    config.write_text("node_retention = \n")
    reaper.proc.send_signal(signal.SIGHUP)
    rejected = wait_for("reload_rejected", lambda: reaper.events("reload_rejected"))
    assert len(rejected) == 1 and "is not valid TOML" in rejected[0]["error"]
    assert "\n" not in rejected[0]["error"]
    # Still running on the settings it had: it sweeps new garbage past 30 days.
    seed_routers(conn, garbage=5, age="35 days", prefix="later-")
    wait_for(
        "later garbage swept", lambda: count(conn, "routers", "router_id", "later-garbage-%") == 0
    )
    assert reaper.proc.poll() is None
    assert reaper.terminate() == 0


@pytest.mark.fresh_db
def test_strict_refuses_to_start_on_a_failed_check(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    seed_routers(conn, garbage=5)
    conn.execute("DROP INDEX routers_lease_expires_at_idx")
    reaper = start_reaper(
        [
            "run",
            "--dsn",
            apply_grants(dsn),
            "--strict",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--jitter",
            "0",
        ],
        tmp_path,
    )
    assert reaper.proc.wait(timeout=60) == 1
    last = reaper.log_path.read_text().strip().splitlines()[-1]
    assert last.startswith(
        "reaper: --strict: 1 check(s) failed, first: router_leases index "
        "routers_lease_expires_at_idx"
    )
    failed = reaper.events("check_failed")
    assert [(e["sweep"], e["check"]) for e in failed] == [("router_leases", "index")]
    assert reaper.events("sweep_finished") == []
    assert count(conn, "routers", "router_id", "garbage-%") == 5


@pytest.mark.fresh_db
def test_strict_starts_when_every_check_passes(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    seed_routers(conn, garbage=5)
    reaper = start_reaper(
        [
            "run",
            "--dsn",
            apply_grants(dsn),
            "--strict",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--jitter",
            "0",
            "--interval",
            "1s",
        ],
        tmp_path,
    )
    wait_for("the garbage swept", lambda: count(conn, "routers", "router_id", "garbage-%") == 0)
    assert reaper.events("checks_finished")[0]["failed"] == 0
    assert reaper.terminate() == 0

"""The full-table interlock: a run that would delete all, or nearly all, of a table of at
least FULL_TABLE_MIN_ROWS rows stops before its first delete (exit 1; the daemon logs and
counts a failure), naming the sweep, the eligible fraction and the setting that allows it.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from reaper.daemon import Daemon
from reaper.settings import FULL_TABLE_MIN_ROWS, build_settings
from reaper.sweeps import BUILTIN_SWEEPS
from tests.support import run_reaper


def _seed(conn: psycopg.Connection[Any], garbage: int, keep: int) -> None:
    """Silent bootstrap members: ``garbage`` 90 days silent, ``keep`` silent for a day."""
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at)"
        " SELECT 'garbage-' || i, now() - interval '90 days' FROM generate_series(1, %s) i",
        (garbage,),
    )
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at)"
        " SELECT 'keep-' || i, now() - interval '1 day' FROM generate_series(1, %s) i",
        (keep,),
    )


def _count(conn: psycopg.Connection[Any], prefix: str) -> int:
    row = conn.execute("SELECT count(*) FROM nodes WHERE peer_id LIKE %s", (prefix + "%",))
    got = row.fetchone()
    assert got is not None
    return int(got[0])


@pytest.mark.parametrize(("strategy"), ["auto", "index", "heap"])
def test_a_run_that_would_empty_the_table_stops_before_its_first_delete(
    dsn: str, conn: psycopg.Connection[Any], strategy: str
) -> None:
    _seed(conn, garbage=3000, keep=0)
    run = run_reaper(
        "run-once", "--sweep", "nodes_silent", "--strategy", strategy, "--json",
        env={"REAPER_DSN": dsn},
    )
    assert run.code == 1, run.stderr
    (result,) = run.json()
    assert result["outcome"] == "failure" and result["rows"] == 0
    error = result["error"]
    assert "sweep nodes_silent: 100.0% of nodes" in error, error
    assert "max_eligible_fraction 0.95" in error and "nothing was deleted" in error
    assert "[sweeps.nodes_silent]" in error and "\n" not in error
    assert _count(conn, "garbage-") == 3000


def test_nearly_all_is_refused_too(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _seed(conn, garbage=2900, keep=100)
    run = run_reaper("run-once", "--sweep", "nodes_silent", env={"REAPER_DSN": dsn})
    assert run.code == 1, run.stderr
    assert "max_eligible_fraction" in run.stdout + run.stderr
    assert _count(conn, "garbage-") == 2900 and _count(conn, "keep-") == 100


def test_below_the_threshold_runs(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _seed(conn, garbage=2000, keep=1000)
    run = run_reaper("run-once", "--sweep", "nodes_silent", env={"REAPER_DSN": dsn})
    assert run.code == 0, run.stderr
    assert _count(conn, "garbage-") == 0 and _count(conn, "keep-") == 1000


def test_a_small_table_is_not_guarded(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _seed(conn, garbage=FULL_TABLE_MIN_ROWS // 2, keep=0)
    run = run_reaper("run-once", "--sweep", "nodes_silent", env={"REAPER_DSN": dsn})
    assert run.code == 0, run.stderr
    assert _count(conn, "garbage-") == 0


def test_a_sweep_opts_in_by_config(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    _seed(conn, garbage=3000, keep=0)
    config = tmp_path / "reaper.toml"
    config.write_text("[sweeps.nodes_silent]\nmax_eligible_fraction = 1\n")
    run = run_reaper(
        "run-once", "--sweep", "nodes_silent", "--config", str(config), env={"REAPER_DSN": dsn}
    )
    assert run.code == 0, run.stderr
    assert _count(conn, "garbage-") == 0


def test_the_global_setting_opts_in(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _seed(conn, garbage=3000, keep=0)
    run = run_reaper(
        "run-once", "--sweep", "nodes_silent", env={"REAPER_DSN": dsn,
                                                  "REAPER_MAX_ELIGIBLE_FRACTION": "1"},
    )
    assert run.code == 0, run.stderr
    assert _count(conn, "garbage-") == 0


def test_a_dry_run_counts_without_the_interlock(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _seed(conn, garbage=3000, keep=0)
    run = run_reaper(
        "run-once", "--dry-run", "--sweep", "nodes_silent", "--json", env={"REAPER_DSN": dsn}
    )
    assert run.code == 0, run.stderr
    assert run.json()[0]["rows"] == 3000


@pytest.mark.parametrize("value", ["1.5", "-0.1", "most"])
def test_the_setting_is_validated(dsn: str, value: str) -> None:
    run = run_reaper(
        "run-once", "--dry-run", env={"REAPER_DSN": dsn, "REAPER_MAX_ELIGIBLE_FRACTION": value}
    )
    assert run.code == 2 and len(run.stderr_lines) == 1, run.stderr
    assert "MAX_ELIGIBLE_FRACTION" in run.stderr


def test_the_daemon_logs_and_counts_a_failure(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(conn, garbage=3000, keep=0)
    settings = build_settings({"dsn": dsn, "listen": "127.0.0.1:0"})
    sweeps = [s for s in BUILTIN_SWEEPS if s.name == "nodes_silent"]
    registry = CollectorRegistry()
    daemon = Daemon(settings, sweeps, registry=registry)
    daemon.db.open()
    try:
        result = daemon.run_sweep_now("nodes_silent")
    finally:
        daemon.stop(timedelta(seconds=5))
    assert result is not None and result.outcome == "failure"
    assert result.error_type == "FullTableRefused"
    failures = registry.get_sample_value(
        "reaper_sweep_runs_total", {"sweep": "nodes_silent", "outcome": "failure"}
    )
    assert failures == 1
    out = capsys.readouterr()
    assert "max_eligible_fraction" in out.out + out.err
    assert _count(conn, "garbage-") == 3000

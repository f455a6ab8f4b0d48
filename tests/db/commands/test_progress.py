"""run-once's progress: bars on a terminal, `sweep_progress` lines otherwise."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from reaper.cli import open_database
from reaper.commands import progress
from reaper.config.engine import engine_options
from reaper.config.settings import build_settings
from reaper.config.sweeps import configured_sweeps
from reaper.engine.run import run_sweep
from tests.support.ops import run_cli


def _seed(conn: psycopg.Connection[Any], expired: int = 500) -> None:
    conn.execute(
        "INSERT INTO routers (router_id, address, lease_expires_at) "
        "SELECT 'old-' || i, 'a', now() - interval '90 days' FROM generate_series(1, %s) i",
        (expired,),
    )
    conn.execute("ANALYZE routers")


def test_plain_progress_lines_off_a_terminal(
    dsn: str, conn: psycopg.Connection[Any], capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(conn)
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_SECONDS", 0.0)
    code, _, err = run_cli(
        capsys,
        "--log-format",
        "json",
        "run-once",
        "--dsn",
        dsn,
        "--sweep",
        "router_leases",
        "--batch-size",
        "100",
        "--strategy",
        "index",
        "--json",
    )
    assert code == 0
    lines = [json.loads(x) for x in err.splitlines() if x.startswith("{")]
    ticks = [x for x in lines if x["event"] == "sweep_progress"]
    assert [t["rows"] for t in ticks] == [100, 200, 300, 400, 500, 500]
    assert {t["estimated_backlog"] for t in ticks} == {500}
    assert all(t["sweep"] == "router_leases" for t in ticks)


def test_bars_count_rows_of_the_estimated_backlog(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _seed(conn, 300)
    settings = build_settings({"dsn": dsn, "batch_size": 100, "strategy": "index"})
    sweep = next(s for s in configured_sweeps(settings) if s.name == "router_leases")
    with open_database(settings) as db, progress.SweepProgress(live=True) as bars:
        seen: list[tuple[float, float | None]] = []

        def on_batch(result: Any) -> None:
            bars.batch(result)
            assert bars._progress is not None
            task = bars._progress.tasks[0]
            seen.append((task.completed, task.total))

        bars.start(sweep.name, 300)
        result = run_sweep(db, sweep, engine_options(settings), on_batch=on_batch)
        bars.finish(result)
    assert seen[:3] == [(100, 300), (200, 300), (300, 300)]
    assert result.rows == 300

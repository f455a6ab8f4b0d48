"""`reaper status`: backlog and upkeep, agreeing with `run-once --dry-run`."""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
import pytest

from reaper.dev import demo
from tests.support import BUILTIN_SWEEPS
from tests.support.ops import run_json


def small_sizes(factor: int = 100) -> demo.Sizes:
    """The audit's rows, the large kinds (1,000 rows or more) ``factor`` times fewer; the
    small kinds (tokens, routers) as they are, since the seed relies on their numbers."""
    full = demo.Sizes()
    return demo.Sizes(
        **{
            f.name: n // factor if (n := getattr(full, f.name)) >= 1000 else n
            for f in dataclasses.fields(full)
        }
    )


def test_status_and_dry_run_agree_and_report_the_tables(
    dsn: str, conn: psycopg.Connection[Any], capsys
) -> None:
    demo.seed(dsn, small_sizes())
    code, dry = run_json(capsys, "run-once", "--dsn", dsn, "--dry-run")
    assert code == 0
    code, status = run_json(capsys, "status", "--dsn", dsn)
    assert code == 0
    assert {r["sweep"]: r["backlog_rows"] for r in status} == {r["sweep"]: r["rows"] for r in dry}
    # Tokens wait for their requests to go.
    assert sum(r["rows"] > 0 for r in dry) == len(BUILTIN_SWEEPS) - 1
    assert all(r["backlog_capped"] is False for r in status)

    routers = next(r for r in status if r["sweep"] == "router_leases")
    # demo: lease i expired 31 days + i * 12 hours ago, i = 1..277; the oldest is 169.5 days.
    assert abs(routers["oldest_eligible_age_seconds"] - 169.5 * 86400) < 3600
    real_rows = conn.execute("SELECT count(*) FROM routers").fetchone()
    assert real_rows is not None
    assert routers["estimated_rows"] == real_rows[0]  # seed() ran ANALYZE
    assert routers["total_bytes"] > 8192
    assert isinstance(routers["dead_tuples"], int)


def test_backlog_is_capped(dsn: str, capsys) -> None:
    demo.seed(dsn, small_sizes())
    code, status = run_json(
        capsys, "status", "--dsn", dsn, "--max-count", "5", "--sweep", "nodes_silent"
    )
    assert code == 0
    assert [(r["backlog_rows"], r["backlog_capped"]) for r in status] == [(5, True)]


@pytest.mark.fresh_db
def test_empty_backlog_and_a_missing_table(dsn: str, conn: psycopg.Connection[Any], capsys) -> None:
    conn.execute("DROP TABLE routers")
    code, status = run_json(capsys, "status", "--dsn", dsn)
    assert code == 1
    by = {r["sweep"]: r for r in status}
    assert "routers" in by["router_leases"]["error"]
    assert by["nodes_session"]["backlog_rows"] == 0
    assert by["nodes_session"]["oldest_eligible_age_seconds"] is None


def test_a_declared_sweep_on_an_expression_index(capsys, pg_server: str) -> None:
    """examples/token-table.toml: check derives the index from the plan, status finds the
    oldest row through the CASE expression, and agrees with the dry run."""
    from pathlib import Path

    from reaper.dev import devserver

    root = Path(__file__).resolve().parents[3]
    dsn = devserver.create_database(pg_server)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute((root / "examples/token-table.sql").read_text())  # type: ignore[arg-type]
            conn.execute(
                "INSERT INTO token (external_id, key, token_type, workspace_id, updated_at, "
                "created_at, active) SELECT gen_random_uuid(), 'k' || i, CASE WHEN i % 2 = 0 "
                "THEN 'worker' ELSE 'machine' END, i % 10, now() - (i % 200) * interval '1 day', "
                "now() - (i % 200) * interval '1 day', i % 3 = 0 FROM generate_series(1, 2000) i"
            )
            conn.execute("ANALYZE token")
        config = str(root / "examples/token-table.toml")
        code, dry = run_json(capsys, "run-once", "--dsn", dsn, "--config", config, "--dry-run")
        assert code == 0
        code, status = run_json(capsys, "status", "--dsn", dsn, "--config", config)
        assert code == 0
        assert {r["sweep"]: r["backlog_rows"] for r in status} == {
            r["sweep"]: r["rows"] for r in dry
        }
        # The oldest worker was refreshed 198 days ago, the oldest machine token created 199.
        ages = {r["sweep"]: round(r["oldest_eligible_age_seconds"] / 86400) for r in status}
        assert ages == {"worker_tokens": 198, "machine_tokens": 199}
        code, doc = run_json(capsys, "check", "--dsn", dsn, "--config", config)
        # Only the role fails: the test connects as a superuser.
        assert [f["check"] for f in doc["findings"] if f["status"] == "fail"] == ["role"], doc
        assert {(f["sweep"], f["subject"]) for f in doc["findings"] if f["check"] == "index"} == {
            ("worker_tokens", "token_worker_refreshed_idx"),
            ("machine_tokens", "token_machine_retired_idx"),
        }
    finally:
        devserver.drop_database(dsn)


def test_status_shows_each_sweeps_next_run_and_window(dsn: str, capsys, tmp_path) -> None:
    """The config's schedule and windows as `reaper status --json` reports them, against the
    wall clock: a window a few hours ahead is shut, one around now is open."""
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    shut = f"{now + timedelta(hours=3):%H}:00-{now + timedelta(hours=4):%H}:00"
    around = f"{now - timedelta(hours=1):%H}:00-{now + timedelta(hours=2):%H}:00"
    config = tmp_path / "reaper.toml"
    config.write_text(
        f'window = "{shut}"\n'
        '[sweeps.router_leases]\nschedule = "0 3 * * *"\nschedule_time_zone = "Asia/Seoul"\n'
        f'[sweeps.nodes_silent]\nwindow = "{around}"\n'
    )
    code, status = run_json(capsys, "status", "--dsn", dsn, "--config", str(config))
    assert code == 0
    by = {r["sweep"]: r for r in status}
    silent, leases, session = by["nodes_silent"], by["router_leases"], by["nodes_session"]
    assert (silent["window"], silent["window_open"], silent["next_run"]) == (around, True, None)
    assert session["window_open"] is False and session["schedule"] == "every 1h"
    opens = datetime.fromisoformat(session["next_run"])
    assert opens == datetime.fromisoformat(session["window_changes"])
    assert timedelta(hours=2) < opens - now <= timedelta(hours=3)
    # Its own zone reads the global window too: 03:00 on Seoul's clock, or the window's
    # opening on Seoul's clock when 03:00 falls outside it.
    from zoneinfo import ZoneInfo

    assert leases["schedule"] == "0 3 * * *" and leases["zone"] == "Asia/Seoul"
    assert leases["window"] == shut
    seoul = datetime.fromisoformat(leases["next_run"]).astimezone(ZoneInfo("Asia/Seoul"))
    assert seoul > now and f"{seoul:%H:%M}" in ("03:00", shut[:5])

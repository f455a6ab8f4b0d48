"""Lock squatting is visible: any login can hold the (publicly computable) advisory lock keys.

A squatter makes every run a skip. That must never look like a clean run: the skip names the
holder (pid, user, application), ``reaper status`` shows it, ``run-once`` exits 3 when nothing
ran, and ``reaper_sweep_runs_total{outcome="skipped"}`` counts it (ReaperSweepSkipped alerts).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from reaper.engine.run import lock_keys
from tests.support import BUILTIN_SWEEPS, login_as, run_reaper
from tests.support.daemon import count, seed_routers

# Every test here changes the schema, grants or settings: a database of its own each.
pytestmark = pytest.mark.fresh_db

ALL = [s.name for s in BUILTIN_SWEEPS]
SQUATTER = "squatter_surface"


@pytest.fixture
def squatter(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An unprivileged login (no grant on any table) of its own, connected to the database."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP ROLE IF EXISTS {SQUATTER}")
        admin.execute(f"CREATE ROLE {SQUATTER} LOGIN")
    try:
        with psycopg.connect(
            make_conninfo(login_as(dsn, SQUATTER), application_name="innocent"), autocommit=True
        ) as conn:
            yield conn
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {SQUATTER}")


def squat(conn: psycopg.Connection[Any], names: list[str]) -> None:
    keys = sorted({k for s in BUILTIN_SWEEPS if s.name in names for k in lock_keys(s)})
    for key in keys:
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))


def test_every_sweep_squatted_is_exit_3_naming_the_holder(
    dsn: str, conn: psycopg.Connection[Any], squatter: psycopg.Connection[Any], tmp_path: Path
) -> None:
    seed_routers(conn, garbage=3)
    squat(squatter, ALL)
    prom = tmp_path / "reaper.prom"
    run = run_reaper("run-once", "--json", "--dsn", dsn, "--metrics-file", str(prom))
    assert run.code == 3, run.stderr
    assert count(conn, "routers", "router_id", "garbage-%") == 3, "nothing was deleted"
    pid = squatter.info.backend_pid
    for r in run.json():
        assert r["outcome"] == "skipped"
        assert [h["pid"] for h in r["lock_holders"]] == [pid], r
        assert r["lock_holders"][0]["user"] == SQUATTER
        assert r["lock_holders"][0]["application_name"] == "innocent"
    skipped = [e for e in run.events() if e["event"] == "sweep_skipped"]
    assert {e["sweep"] for e in skipped} == set(ALL)
    assert all(e["lock_holders"][0]["pid"] == pid for e in skipped)
    text = prom.read_text()
    for name in ALL:
        assert f'reaper_sweep_runs_total{{outcome="skipped",sweep="{name}"}} 1.0' in text

    status = run_reaper("status", "--json", "--dsn", dsn)
    assert status.code == 0, status.stderr
    for row in status.json():
        assert [h["pid"] for h in row["lock_holders"]] == [pid], row
    table = run_reaper("status", "--dsn", dsn)
    # (Tables wrap at the terminal's width: compare the words.)
    shown = " ".join(table.stdout.split())
    assert f"lock held by pid {pid} (user {SQUATTER}, application 'innocent'" in shown


def test_one_sweep_squatted_is_still_exit_0_and_names_it(
    dsn: str, squatter: psycopg.Connection[Any]
) -> None:
    squat(squatter, ["router_leases"])
    run = run_reaper("run-once", "--dsn", dsn)
    assert run.code == 0, run.stderr
    shown = " ".join(run.stdout.split())
    assert f"router_leases: skipped, lock held by pid {squatter.info.backend_pid}" in shown
    squatter.execute("SELECT pg_advisory_unlock_all()")
    status = run_reaper("status", "--json", "--dsn", dsn)
    assert all(row["lock_holders"] == [] for row in status.json())


def test_a_skip_counts_from_zero(dsn: str, squatter: psycopg.Connection[Any], tmp_path) -> None:
    """The skipped label set exists before any skip, so increase() sees the first one."""
    prom = tmp_path / "reaper.prom"
    run = run_reaper("run-once", "--dsn", dsn, "--metrics-file", str(prom))
    assert run.code == 0, run.stderr
    assert 'reaper_sweep_runs_total{outcome="skipped",sweep="nodes_silent"} 0.0' in prom.read_text()

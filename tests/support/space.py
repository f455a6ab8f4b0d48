"""Helpers for the tests of what keeps deleted rows' space (``reaper.commands.space``):
a snapshot held open the way a forgotten report or a stuck client holds one, and router
leases that reaper deletes while it is held."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support.daemon import seed_routers
from tests.support.ops import run_json

# Rows reaper deletes while the snapshot is held, and rows it keeps.
GARBAGE = 2_000
KEEP = 200


@contextlib.contextmanager
def held_snapshot(dsn: str, application_name: str = "monthly-report") -> Iterator[int]:
    """A session in an open REPEATABLE READ transaction that has taken its snapshot (idle in
    transaction, as a client that forgot to commit leaves it); yields its pid. Rolled back and
    closed afterwards."""
    with psycopg.connect(dsn, application_name=application_name) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT count(*) FROM pg_catalog.pg_class").fetchone()
        yield conn.info.backend_pid
        conn.rollback()


def sweep_routers(capsys: pytest.CaptureFixture[str], dsn: str, prefix: str = "") -> None:
    """Seed :data:`GARBAGE` expired router leases and :data:`KEEP` live ones (their keys
    starting with ``prefix``), let ``reaper run-once`` delete the expired ones, then VACUUM
    the table as its owner would (a fresh vacuum), once the statistics count the deletes: a
    count that a backend reported after the vacuum would be added to the vacuum's own, and
    the table would show twice the dead rows it holds."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        seed_routers(conn, garbage=GARBAGE, keep=KEEP, prefix=prefix)
        conn.execute("ANALYZE public.routers")
        before = _dead_rows(conn)
    code, results = run_json(capsys, "run-once", "--dsn", dsn, "--sweep", "router_leases")
    assert code == 0, results
    assert [r["rows"] for r in results] == [GARBAGE]
    dead_rows_counted(dsn, before + GARBAGE)
    vacuum_routers(dsn)


def _dead_rows(conn: psycopg.Connection[Any], table: str = "routers") -> int:
    """The statistics' dead rows of ``table`` now (a fresh snapshot of them)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = %s::regclass",
        (f"public.{table}",),
    ).fetchone()
    return int(row[0]) if row else 0


def vacuum_routers(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM public.routers")


def space_of(status: list[dict[str, Any]], sweep: str = "router_leases") -> dict[str, Any]:
    """The ``space`` entry of ``sweep`` in ``reaper status --json``."""
    row = next(r for r in status if r["sweep"] == sweep)
    assert row["space_error"] is None, row["space_error"]
    space: dict[str, Any] = row["space"]
    return space


def dead_rows_counted(dsn: str, at_least: int, table: str = "routers") -> None:
    """Wait (10 s at most) until the statistics count ``at_least`` dead rows in ``table``: a
    backend reports its counts when it goes idle or exits, up to seconds after its commit."""
    deadline = time.monotonic() + 10
    with psycopg.connect(dsn, autocommit=True) as conn:
        while _dead_rows(conn, table) < at_least and time.monotonic() < deadline:
            time.sleep(0.1)

"""Partition retention on a real PostgreSQL: partitions whose bounds prove every row past the
cutoff are dropped whole, the rest is swept row by row, and nothing the retention keeps goes.

Row keys say what must happen: ``go-*`` rows must be gone afterwards, ``stay-*`` rows must
survive. The clock is pinned (``now=NOW``) so every cutoff is exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg.conninfo
import pytest

from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import build_settings
from reaper.db import Database
from reaper.engine.run import run_sweep
from tests.support import NOW, run_reaper
from tests.support.partitions import (
    STRADDLE_CUTOFF,
    create_events,
    events_settings,
    keys,
    partitions,
    seed,
)

# Every test here changes the schema, grants or settings: a database of its own each.
pytestmark = pytest.mark.fresh_db

# 180 days: 2025-12-03 12:00 UTC, inside the December partition (the boundary).


@pytest.fixture
def db(dsn: str) -> Iterator[Database]:
    settings = build_settings({"dsn": dsn})
    with Database(connection_settings(settings)) as database:
        yield database


# -- the proof: pure, no database ----------------------------------------------------------


# -- dropping -------------------------------------------------------------------------------


def test_dry_run_lists_the_partitions_with_estimated_rows_and_changes_nothing(
    dsn: str, conn: psycopg.Connection[Any], db: Database, tmp_path: Any
) -> None:
    create_events(conn)
    seed(conn, STRADDLE_CUTOFF)
    before_keys, before_partitions = keys(conn), partitions(conn)
    settings, sweep = events_settings(dsn)
    result = run_sweep(db, sweep, engine_options(settings), now=NOW, dry_run=True)
    assert result.outcome == "success"
    assert keys(conn) == before_keys and partitions(conn) == before_partitions
    assert [(p["partition"], p["estimated_rows"]) for p in result.partitions] == [
        (f"public.events_2025_{m:02d}", 5) for m in range(6, 12)
    ]
    assert result.rows == len([k for k in before_keys if k.startswith("go-")])

    config = tmp_path / "reaper.toml"
    config.write_text(
        '[sweeps.events]\ntable = "public.events"\nreason = "expired"\n'
        'age = "created_at"\nretention = "180d"\n'
    )
    run = run_reaper(
        "run-once",
        "--dry-run",
        "--sweep",
        "events",
        "--config",
        str(config),
        env={"REAPER_DSN": dsn},
    )
    assert run.code == 0, run.stderr
    assert "would drop partition public.events_2025_06 (~5 rows, estimated)" in run.stdout
    assert keys(conn) == before_keys and partitions(conn) == before_partitions

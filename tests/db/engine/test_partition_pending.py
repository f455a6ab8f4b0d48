"""A pending partition detach never fails the whole run: with a snapshot older than the
detach open, the second half of ``DETACH ... CONCURRENTLY`` gives up at lock_timeout and leaves
its partition detach-pending, and PostgreSQL refuses any other detach from that parent until
it is finished. Each partition's step fails or waits on its own; the rows of every partition
past the cutoff are deleted by the batches all the same, the run succeeds, and once the old
snapshot ends the next run finishes the detach and drops the rest.

``go-*`` rows must be gone afterwards, ``stay-*`` rows kept; the clock is pinned (``now=NOW``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
import structlog

from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.db import Database
from reaper.engine.run import run_sweep
from tests.support import NOW
from tests.support.partitions import (
    STRADDLE_CUTOFF,
    create_events,
    events_settings,
    keys,
    partitions,
    seed,
)

pytestmark = pytest.mark.fresh_db

# The six monthly partitions wholly past the 180-day cutoff (2025-06 .. 2025-11).
EXPIRED = {f"events_2025_{m:02d}" for m in range(6, 12)}


@contextmanager
def old_snapshot(dsn: str) -> Iterator[None]:
    """A reader whose REPEATABLE READ snapshot of ``events`` stays open for the block."""
    with psycopg.connect(dsn) as reader:
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM events").fetchone()
        yield
        reader.rollback()


def pending(conn: psycopg.Connection[Any]) -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhdetachpending"
        )
    ]


def events_named(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name]


@pytest.mark.parametrize("default", [False, True], ids=["concurrently", "beside-default"])
def test_an_old_snapshot_delays_the_detaches_but_never_fails_the_run(
    dsn: str, conn: psycopg.Connection[Any], default: bool
) -> None:
    """Without a DEFAULT partition the detach is CONCURRENTLY (one left pending, the others
    wait for it); beside one it is a plain DETACH, each waiting lock_timeout on its own."""
    create_events(conn, default=default)
    seed(conn, STRADDLE_CUTOFF, default=default)
    expected = {k for k in keys(conn) if k.startswith("stay-")}
    settings, sweep = events_settings(dsn, lock_timeout="200ms")
    with Database(connection_settings(settings)) as db:
        with old_snapshot(dsn):
            for _ in range(2):  # every run while the snapshot lasts
                t0 = time.monotonic()
                with structlog.testing.capture_logs() as logs:
                    result = run_sweep(db, sweep, engine_options(settings), now=NOW)
                seconds = time.monotonic() - t0
                assert result.outcome == "success", result.error
                assert keys(conn) == expected
                assert len(pending(conn)) <= 1
                failed = events_named(logs, "partition_drop_failed")
                waiting = events_named(logs, "partition_detach_waiting")
                finalize = events_named(logs, "partition_detach_finalize_failed")
                if default:
                    # Each plain DETACH waited lock_timeout for its own lock, and gave up.
                    assert len(failed) == len(EXPIRED) and not waiting
                else:
                    # One detach tried (or its FINALIZE), the other five wait for it: no
                    # detach is sent that PostgreSQL must refuse.
                    assert len(failed) + len(finalize) == 1
                    assert len(waiting) == len(EXPIRED) - 1
                    assert {e["pending"] for e in waiting} == {"public.events_2025_06"}
                assert not any("already pending" in str(e.get("error")) for e in logs)
                assert seconds < 30  # a few lock_timeouts, not statement_timeouts
            assert partitions(conn) | {p.split(".")[-1] for p in pending(conn)} >= EXPIRED
        # The snapshot is gone: the next run finishes the detach and drops every partition
        # past the cutoff.
        with structlog.testing.capture_logs() as logs:
            result = run_sweep(db, sweep, engine_options(settings), now=NOW)
    assert result.outcome == "success", result.error
    assert pending(conn) == []
    assert not (EXPIRED & partitions(conn))
    assert keys(conn) == expected
    assert not events_named(logs, "partition_drop_failed")


def test_a_detach_left_pending_by_an_earlier_run_holds_back_only_its_parent(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """The detach pending from an interrupted run cannot be finished while an old snapshot
    lasts: its FINALIZE fails on its own, the other partitions wait, the rows go."""
    create_events(conn, default=False)
    seed(conn, STRADDLE_CUTOFF, default=False)
    expected = {k for k in keys(conn) if k.startswith("stay-")}
    with old_snapshot(dsn), psycopg.connect(dsn, autocommit=True) as detacher:
        detacher.execute("SET lock_timeout = '200ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            detacher.execute("ALTER TABLE events DETACH PARTITION events_2025_08 CONCURRENTLY")
        assert pending(conn) == ["events_2025_08"]
        settings, sweep = events_settings(dsn, lock_timeout="200ms")
        with (
            Database(connection_settings(settings)) as db,
            structlog.testing.capture_logs() as logs,
        ):
            result = run_sweep(db, sweep, engine_options(settings), now=NOW)
    assert result.outcome == "success", result.error
    assert keys(conn) == expected
    assert len(events_named(logs, "partition_detach_finalize_failed")) == 1
    waiting = events_named(logs, "partition_detach_waiting")
    assert {e["partition"] for e in waiting} == {f"public.{p}" for p in EXPIRED} - {
        "public.events_2025_08"
    }
    assert not events_named(logs, "partition_drop_failed")

"""Pacing against real servers: a streaming standby whose replay is paused, live sessions on
the swept database, and a role that cannot see them."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from bench import replica
from reaper.commands import checks
from reaper.config.connection import connection_settings
from reaper.config.settings import build_settings
from reaper.db import Database
from reaper.dev import devserver
from reaper.engine.result import SweepResult
from reaper.engine.run import SUCCESS, run_sweep
from reaper.metrics import Metrics
from tests.support import BUILTIN_SWEEPS, sweeps_of


def seed_nodes(conn: psycopg.Connection[Any], garbage: int, keep: int) -> None:
    """``garbage`` bootstrap members silent for 60 days, ``keep`` heard from an hour ago."""
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at, banned, ephemeral) "
        "SELECT 'garbage-' || i, now() - interval '60 days', false, false "
        "FROM generate_series(1, %s) AS i", (garbage,))
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at, banned, ephemeral) "
        "SELECT 'keep-' || i, now() - interval '1 hour', false, false "
        "FROM generate_series(1, %s) AS i", (keep,))
    conn.execute("ANALYZE nodes")


def counts(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE peer_id LIKE 'garbage-%%'), "
        "count(*) FILTER (WHERE peer_id LIKE 'keep-%%') FROM nodes").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def throttled(registry: CollectorRegistry, reason: str) -> float:
    return registry.get_sample_value(
        "reaper_throttled_seconds_total", {"sweep": "nodes_silent", "reason": reason}) or 0.0


@pytest.mark.slow
def test_paused_standby_stops_the_sweep_until_it_replays_again() -> None:
    garbage = 300_000
    reason = replica.why_unavailable()
    if reason:
        pytest.skip(reason)
    with replica.primary_and_standby(fsync="off") as pair:
        dsn = devserver.create_database(pair.primary, f"reaper_pacing_{uuid.uuid4().hex[:6]}")
        devserver.load_schema(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            # Enough batches that the sweep outlasts max_replica_lag by far (1,500 of them).
            seed_nodes(conn, garbage=garbage, keep=1_000)
        replica.wait_streaming(pair.primary)
        settings = build_settings({"dsn": dsn, "strategy": "index", "batch_size": 200,
                                   "max_replica_lag": "1s", "busy_share": 1,
                                   "max_eligible_fraction": 1})
        registry = CollectorRegistry()
        metrics = Metrics(BUILTIN_SWEEPS, registry)
        assert throttled(registry, "replica_lag") == 0.0  # the label set exists from the start
        replica.set_replay(pair.standby, paused=True)
        results: list[SweepResult] = []
        with Database(connection_settings(settings)) as db:
            worker = threading.Thread(
                target=lambda: results.append(run_sweep(
                    db, sweeps_of(settings)["nodes_silent"], settings, metrics=metrics)))
            worker.start()
            # The standby falls behind: within a batch of 1 s the sweep waits.
            deadline = time.monotonic() + 60
            while throttled(registry, "replica_lag") == 0.0:
                assert time.monotonic() < deadline, "the sweep never paused"
                assert worker.is_alive(), results
                time.sleep(0.05)
            with psycopg.connect(dsn, autocommit=True) as conn:
                left, kept = counts(conn)
                assert 0 < left < garbage and kept == 1_000
                time.sleep(2.0)
                # While paused, no batch ran.
                assert counts(conn) == (left, kept)
                assert worker.is_alive()
                replica.set_replay(pair.standby, paused=False)
                worker.join(timeout=120)
                assert not worker.is_alive()
                assert counts(conn) == (0, 1_000)
        result = results[0]
        assert result.outcome == SUCCESS and result.stopped_by == "done", result
        assert result.rows == garbage
        assert throttled(registry, "replica_lag") >= 2.0
        assert throttled(registry, "load") == 0.0


@pytest.mark.slow
def test_paused_run_ends_at_its_budget_and_says_why() -> None:
    reason = replica.why_unavailable()
    if reason:
        pytest.skip(reason)
    with replica.primary_and_standby(fsync="off") as pair:
        dsn = devserver.create_database(pair.primary, f"reaper_pacing_{uuid.uuid4().hex[:6]}")
        devserver.load_schema(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            seed_nodes(conn, garbage=60_000, keep=10)
        replica.wait_streaming(pair.primary)
        replica.set_replay(pair.standby, paused=True)
        # The run dates the standby's lag from its own first sample (it has no earlier WAL
        # positions): the limit must be far below the run's length, which is 0.5 s on a
        # fast machine (300 batches of 200 rows).
        settings = build_settings({"dsn": dsn, "strategy": "index", "batch_size": 200,
                                   "max_replica_lag": "100ms", "max_seconds_per_run": "4s",
                                   "max_eligible_fraction": 1})
        with Database(connection_settings(settings)) as db:
            t0 = time.monotonic()
            result = run_sweep(db, sweeps_of(settings)["nodes_silent"], settings)
            took = time.monotonic() - t0
        assert result.outcome == SUCCESS
        assert result.stopped_by == "replica_lag"
        assert 0 < result.rows < 60_000
        assert 3.5 < took < 10  # the budget held


def _client(dsn: str, stop: threading.Event) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            conn.execute("UPDATE nodes SET enrolled_at = now() WHERE peer_id = 'keep-1'")
            time.sleep(0.005)


@contextmanager
def live_client(dsn: str) -> Iterator[None]:
    """Another session refreshing a member every 5 ms while the block runs (started 0.3 s
    before it, so that the pacer's first sample sees it)."""
    stop = threading.Event()
    client = threading.Thread(target=_client, args=(dsn, stop))
    client.start()
    try:
        time.sleep(0.3)
        yield
    finally:
        stop.set()
        client.join()


def test_live_sessions_slow_the_sweep_and_a_quiet_database_does_not(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    seed_nodes(conn, garbage=5_000, keep=100)
    settings = build_settings({"dsn": dsn, "strategy": "index", "batch_size": 500,
                               "busy_share": 0.25, "max_eligible_fraction": 1})
    registry = CollectorRegistry()
    metrics = Metrics(BUILTIN_SWEEPS, registry)
    with Database(connection_settings(settings)) as db:
        with live_client(dsn):
            busy = run_sweep(db, sweeps_of(settings)["nodes_silent"], settings, metrics=metrics)
        assert busy.outcome == SUCCESS and busy.rows == 5_000
        assert counts(conn) == (0, 100)
        waited = throttled(registry, "load")
        # Each batch after the first was followed by three times its duration of waiting.
        assert waited >= 2.5 * sum(busy.batch_seconds[:-1])
        assert throttled(registry, "replica_lag") == 0.0
        # Nothing else runs now (this test's own connection last ran a statement over a
        # second ago): no wait at all.
        seed_nodes(conn, garbage=5_000, keep=0)
        time.sleep(1.5)
        quiet = run_sweep(db, sweeps_of(settings)["nodes_silent"], settings, metrics=metrics)
        assert quiet.rows == 5_000
        assert throttled(registry, "load") == waited


def test_live_sessions_make_the_batches_short(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """While another session uses the database, each batch aims at busy_batch_seconds: its
    row limit halves from the batch size while batches take longer than that, and every
    garbage row still goes."""
    seed_nodes(conn, garbage=30_000, keep=100)
    settings = build_settings({"dsn": dsn, "strategy": "index", "batch_size": 5_000,
                               "busy_share": 0.9, "busy_batch_seconds": "2ms",
                               "max_eligible_fraction": 1})
    sizes: list[int] = []

    def on_batch(r: SweepResult) -> None:
        sizes.append(r.rows - sum(sizes))

    with Database(connection_settings(settings)) as db, live_client(dsn):
        busy = run_sweep(db, sweeps_of(settings)["nodes_silent"], settings, on_batch=on_batch)
    assert busy.outcome == SUCCESS and busy.rows == 30_000
    assert counts(conn) == (0, 100)
    assert sizes[0] == 5_000  # nothing measured yet: the batch size
    # A 5,000-row batch takes far longer than 2 ms: the limit halves, batch after batch.
    assert max(sizes[1:-1]) <= 2_500, sizes
    assert min(sizes[:-1]) < 1_000, sizes


def test_check_warns_when_the_role_cannot_see_standbys_and_sessions(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    role = f"reaper_pacing_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        settings = build_settings({"dsn": psycopg.conninfo.make_conninfo(dsn, user=role)})
        with Database(connection_settings(settings)) as db:
            found = [f for f in checks.run_checks(db, [], settings) if f.check == "pacing"]
        assert [(f.status, f.fix) for f in found] == [("warn", f"GRANT pg_monitor TO {role}")]
        conn.execute(f"GRANT pg_monitor TO {role}")
        with Database(connection_settings(settings)) as db:
            found = [f for f in checks.run_checks(db, [], settings) if f.check == "pacing"]
        assert [f.status for f in found] == ["pass"]
    finally:
        conn.execute(f"DROP ROLE {role}")

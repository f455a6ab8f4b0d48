"""Pacing against real servers: a streaming standby whose replay is paused, live sessions on
the swept database, and a role that cannot see them."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from bench import replica
from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import build_settings
from reaper.db import Database
from reaper.dev import devserver
from reaper.engine.result import SweepResult
from reaper.engine.run import SUCCESS, run_sweep
from reaper.metrics import Metrics
from tests.support import BUILTIN_SWEEPS, sweeps_of
from tests.support.pacing_db import counts, seed_nodes, throttled

# Every test here changes the schema, grants or settings: a database of its own each.
pytestmark = pytest.mark.fresh_db


@pytest.mark.slow
@pytest.mark.parametrize(("strategy", "parallel"), [("index", 1), ("heap", 3)])
def test_paused_standby_stops_the_sweep_until_it_replays_again(
    strategy: str, parallel: int
) -> None:
    """Paused replay stops every batch, a parallel walk's extra connections' too, until the
    standby replays again."""
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
        settings = build_settings(
            {
                "dsn": dsn,
                "strategy": strategy,
                "batch_size": 200,
                "parallel": parallel,
                "max_replica_lag": "1s",
                "busy_share": 1,
                "max_eligible_fraction": 1,
            }
        )
        registry = CollectorRegistry()
        metrics = Metrics(BUILTIN_SWEEPS, registry)
        assert throttled(registry, "replica_lag") == 0.0  # the label set exists from the start
        replica.set_replay(pair.standby, paused=True)
        results: list[SweepResult] = []
        with Database(connection_settings(settings)) as db:
            worker = threading.Thread(
                target=lambda: results.append(
                    run_sweep(
                        db,
                        sweeps_of(settings)["nodes_silent"],
                        engine_options(settings),
                        metrics=metrics,
                    )
                )
            )
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
        settings = build_settings(
            {
                "dsn": dsn,
                "strategy": "index",
                "batch_size": 200,
                "max_replica_lag": "100ms",
                "max_seconds_per_run": "4s",
                "max_eligible_fraction": 1,
            }
        )
        with Database(connection_settings(settings)) as db:
            t0 = time.monotonic()
            result = run_sweep(db, sweeps_of(settings)["nodes_silent"], engine_options(settings))
            took = time.monotonic() - t0
        assert result.outcome == SUCCESS
        assert result.stopped_by == "replica_lag"
        assert 0 < result.rows < 60_000
        assert 3.5 < took < 10  # the budget held

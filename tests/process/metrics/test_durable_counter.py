"""reaper_deleted_rows_total counts only deletes that a failover cannot undo: batches commit
with synchronous_commit off, and their rows are counted once the WAL past them is flushed on
the primary and on its streaming standbys. A failover to a standby that stopped receiving WAL
(its link silent, the primary still up) promotes a database where the rows deleted since
are back: the counter says exactly what the promoted database lost, never more.

A primary and a streaming standby of the test's own (initdb + pg_basebackup); the standby
streams through a TCP proxy that the test silences.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import structlog
from prometheus_client import CollectorRegistry

from bench import replica
from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import build_settings
from reaper.config.sweeps import Budget
from reaper.db import Database
from reaper.dev import devserver
from reaper.engine import durable
from reaper.engine import run as runner
from reaper.metrics import Metrics
from tests.support import BUILTIN_SWEEPS, sweeps_of
from tests.support.netfaults import SilentProxy
from tests.support.pacing_db import seed_nodes

pytestmark = pytest.mark.slow


def deleted_counter(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value(
        "reaper_deleted_rows_total", {"table": "nodes", "reason": "silent"}
    )
    return value or 0.0


def garbage_left(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM nodes WHERE peer_id LIKE 'garbage-%'")
        got = row.fetchone()
    assert got is not None
    return int(got[0])


def stream_through(pair: Any, proxy: SilentProxy) -> None:
    """Point the standby's WAL receiver at ``proxy`` (reloaded: it reconnects)."""
    with psycopg.connect(pair.standby, autocommit=True) as conn:
        conn.execute(
            "ALTER SYSTEM SET primary_conninfo = "
            f"'host=127.0.0.1 port={proxy.port} user=postgres "
            f"application_name={replica.STANDBY_NAME}'"
        )
        conn.execute("SELECT pg_reload_conf()")
    replica.wait_streaming(pair.primary)


def test_a_failover_to_a_standby_that_missed_batches_leaves_the_counter_exact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reason = replica.why_unavailable()
    if reason:
        pytest.skip(reason)
    # The run's wait for its last batches' durability, shortened (10 s by default).
    monkeypatch.setattr(durable, "DURABLE_WAIT_SECONDS", 2.0)
    with replica.primary_and_standby(fsync="off") as pair:
        dbname = f"reaper_durable_{uuid.uuid4().hex[:6]}"
        dsn = devserver.create_database(pair.primary, dbname)
        devserver.load_schema(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            seed_nodes(conn, garbage=3_000, keep=100)
        target = psycopg.conninfo.conninfo_to_dict(pair.primary)
        proxy = SilentProxy("127.0.0.1", int(str(target["port"])))
        try:
            stream_through(pair, proxy)
            registry = CollectorRegistry()
            metrics = Metrics(BUILTIN_SWEEPS, registry)
            values = {
                "dsn": dsn,
                "strategy": "index",
                "batch_size": 100,
                "max_replica_lag": "0",
                "busy_share": 1,
                "max_eligible_fraction": 1,
            }
            sweep = sweeps_of(build_settings(values))["nodes_silent"]
            settings = build_settings(values)
            with Database(connection_settings(settings)) as db:
                # The standby receives everything: every deleted row counted.
                result = runner.run_sweep(
                    db,
                    sweep,
                    engine_options(settings),
                    metrics=metrics,
                    budget=Budget(max_rows=1_000),
                )
                assert result.outcome == "success" and result.rows == 1_000
                assert deleted_counter(registry) == 1_000
                # The standby's link goes silent: the primary commits the rest, which the
                # standby never receives.
                proxy.pause()
                with structlog.testing.capture_logs() as logs:
                    result = runner.run_sweep(db, sweep, engine_options(settings), metrics=metrics)
                assert result.outcome == "success" and result.rows == 2_000
                assert garbage_left(dsn) == 0
            # Not counted: the standby never confirmed them, and the run says so.
            assert deleted_counter(registry) == 1_000
            (warning,) = [e for e in logs if e["event"] == "deleted_rows_not_counted"]
            assert warning["rows"] == 2_000
            # Failover: the primary dies, the standby is promoted; the rows deleted after
            # the link went silent are back there, exactly those the counter left out.
            root = Path(pair.root)
            replica._Runner(replica.pg_bin())(  # type: ignore[arg-type]
                "pg_ctl", "-D", str(root / "primary"), "-m", "immediate", "-w", "stop"
            )
            replica._Runner(replica.pg_bin())(  # type: ignore[arg-type]
                "pg_ctl", "-D", str(root / "standby"), "-w", "promote"
            )
            promoted = psycopg.conninfo.make_conninfo(pair.standby, dbname=dbname)
            assert 3_000 - garbage_left(promoted) == deleted_counter(registry) == 1_000
        finally:
            proxy.close()

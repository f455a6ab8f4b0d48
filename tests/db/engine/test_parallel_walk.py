"""The heap walk on several connections (``--parallel``) on a real PostgreSQL: the deletes run
on more than one server process and never on more than ``parallel``, only garbage goes,
each garbage row once, the counters are the rows gone; with live traffic the run's own
connection deletes alone. The invariant tests of test_sweeps.py and test_concurrency.py run
with ``parallel`` above 1 too; the decisions themselves: tests/unit/engine/test_parallel_walk.py.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from reaper.config.engine import engine_options
from reaper.engine.run import run_sweep
from reaper.metrics import Metrics
from tests.support import NOW, keys, sweeps_of

OLD = NOW - timedelta(days=60)


def seed(conn: psycopg.Connection[Any], rows: int) -> None:
    """``rows`` members, three in four silent past the cutoff (go-*), one in four banned
    (stay-*), and a statement-level trigger that records which server process deleted how
    many of them."""
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at, banned)"
        " SELECT CASE WHEN i %% 4 = 0 THEN 'stay-' ELSE 'go-' END || i, %s, i %% 4 = 0"
        " FROM generate_series(1, %s) i",
        (OLD, rows),
    )
    conn.execute("ANALYZE nodes")
    conn.execute(
        "CREATE TABLE deleted_by (pid int NOT NULL, rows bigint NOT NULL);"
        "CREATE FUNCTION record_deleter() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN INSERT INTO public.deleted_by SELECT pg_backend_pid(), count(*) FROM gone;"
        " RETURN NULL; END $$;"
        "CREATE TRIGGER record_deleter AFTER DELETE ON nodes REFERENCING OLD TABLE AS gone"
        " FOR EACH STATEMENT EXECUTE FUNCTION record_deleter();"
    )


def deleters(conn: psycopg.Connection[Any]) -> dict[int, int]:
    """Rows deleted per server process."""
    return {
        int(pid): int(n)
        for pid, n in conn.execute(
            "SELECT pid, sum(rows) FROM deleted_by GROUP BY pid HAVING sum(rows) > 0"
        )
    }


@pytest.mark.fresh_db
@pytest.mark.parametrize("parallel", [2, 3])
def test_disjoint_ranges_on_several_connections_delete_every_garbage_row_once(
    conn, make_settings, database, parallel
) -> None:
    seed(conn, 40_000)
    before = keys(conn, "nodes")
    settings = make_settings(strategy="heap", batch_size=500, parallel=parallel)
    sweep = sweeps_of(settings)["nodes_silent"]
    metrics = Metrics([sweep], CollectorRegistry())
    result = run_sweep(database, sweep, engine_options(settings), now=NOW, metrics=metrics)
    assert (result.outcome, result.stopped_by) == ("success", "done"), result.error
    go = {k for k in before if k.startswith("go-")}
    assert keys(conn, "nodes") == before - go
    by = deleters(conn)
    # Every garbage row deleted once; the counters are the rows gone.
    assert sum(by.values()) == result.rows == len(go) == 30_000
    assert metrics.registry.get_sample_value(
        "reaper_deleted_rows_total", {"table": "nodes", "reason": "silent"}
    ) == len(go)
    # On more than one server process, never on more than --parallel.
    assert 2 <= len(by) <= parallel


@pytest.mark.fresh_db
def test_a_parallel_walk_stops_at_its_row_budget_and_on_a_stop(
    conn, make_settings, database
) -> None:
    seed(conn, 40_000)
    settings = make_settings(strategy="heap", batch_size=500, parallel=3, max_rows_per_run=7_000)
    sweep = sweeps_of(settings)["nodes_silent"]
    result = run_sweep(database, sweep, engine_options(settings), now=NOW)
    assert (result.outcome, result.stopped_by) == ("success", "max_rows")
    # The workers' batches share what the budget has left: never past it.
    assert result.rows == 7_000 == sum(deleters(conn).values())

    stop = threading.Event()
    settings = make_settings(strategy="heap", batch_size=500, parallel=3)
    result = run_sweep(
        database,
        sweeps_of(settings)["nodes_silent"],
        engine_options(settings),
        now=NOW,
        stop=stop,
        on_batch=lambda r: r.rows >= 14_000 and stop.set(),
    )
    assert (result.outcome, result.stopped_by) == ("success", "stop")
    # Each worker ends after its batch in flight.
    assert 14_000 <= result.rows <= 14_000 + 3 * 500
    assert result.rows + 7_000 == sum(deleters(conn).values())
    assert len(keys(conn, "nodes")) == 40_000 - 7_000 - result.rows


@pytest.mark.fresh_db
def test_live_traffic_leaves_the_run_its_own_connection_only(
    dsn, conn, make_settings, database
) -> None:
    seed(conn, 8_000)
    settings = make_settings(strategy="heap", batch_size=500, parallel=3, busy_share="0.9")
    done = threading.Event()

    def traffic() -> None:
        # A client that runs a statement every few milliseconds: live traffic to the pacer.
        with psycopg.connect(dsn, autocommit=True) as live:
            while not done.is_set():
                live.execute("SELECT pg_sleep(0.005)")

    client = threading.Thread(target=traffic, daemon=True)
    client.start()
    try:
        result = run_sweep(
            database, sweeps_of(settings)["nodes_silent"], engine_options(settings), now=NOW
        )
    finally:
        done.set()
        client.join(timeout=30)
    assert result.outcome == "success", result.error
    assert result.rows == 6_000
    # The pacer saw the database busy: one server process deleted every row.
    assert list(deleters(conn).values()) == [6_000]

"""The full-table interlock: a run that would delete all, or nearly all, of a table of at
least FULL_TABLE_MIN_ROWS rows stops before its first delete (exit 1; the daemon logs and
counts a refusal), naming the sweep, the eligible fraction and the setting that allows it.
"""

from __future__ import annotations

import tomllib
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import structlog
from prometheus_client import CollectorRegistry

from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import build_settings
from reaper.config.sweeps import configured_sweeps
from reaper.daemon.scheduler import Daemon
from reaper.db import Database
from reaper.engine.run import Sweeper, run_sweep
from reaper.errors import FullTableRefused
from tests.support import sweeps_of
from tests.support.safety_interlock import BIG, HALVES, _big, _count, _seed


def test_the_daemon_logs_and_counts_a_refusal(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _seed(conn, garbage=3000, keep=0)
    settings = build_settings({"dsn": dsn, "listen": "127.0.0.1:0"})
    sweeps = [sweeps_of(settings)["nodes_silent"]]
    registry = CollectorRegistry()
    daemon = Daemon(settings, sweeps, registry=registry)
    daemon.db.open()
    try:
        with structlog.testing.capture_logs() as logs:
            result = daemon.run_sweep("nodes_silent")
    finally:
        daemon.stop(timedelta(seconds=5))
    assert result is not None and result.outcome == "refused"
    assert result.error_type == "FullTableRefused"
    runs = {
        outcome: registry.get_sample_value(
            "reaper_sweep_runs_total", {"sweep": "nodes_silent", "outcome": outcome}
        )
        for outcome in ("refused", "failure")
    }
    assert runs == {"refused": 1, "failure": 0}
    # One line of its own, naming the setting: a refusal is no failure.
    lines = [e for e in logs if e["event"] in ("sweep_refused", "sweep_failed")]
    assert [e["event"] for e in lines] == ["sweep_refused"]
    assert "max_eligible_fraction" in lines[0]["error"]
    assert _count(conn, "garbage-") == 3000


# -- the table's window: splitting the work over sweeps or runs does not get past it ---------


@pytest.mark.fresh_db
def test_the_daemon_judges_runs_on_one_database_together(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """Two runs by one Sweeper on one Database (the daemon's shape): the second is refused;
    a run on a new Database (a new process) starts a new window."""
    conn.execute(BIG)
    settings = build_settings({"dsn": dsn}, tomllib.loads(HALVES))
    sweeps = {s.name: s for s in configured_sweeps(settings)}
    sweeper = Sweeper()
    with Database(connection_settings(settings)) as db:
        first = run_sweep(db, sweeps["half_a"], engine_options(settings), sweeper=sweeper)
        second = run_sweep(db, sweeps["half_b"], engine_options(settings), sweeper=sweeper)
        third = run_sweep(db, sweeps["half_b"], engine_options(settings), sweeper=sweeper)
    assert first.outcome == "success" and first.rows == 950
    assert second.outcome == "refused" and second.error_type == "FullTableRefused"
    assert third.outcome == "refused" and second.rows == third.rows == 0
    assert _big(conn) == 950


@pytest.mark.fresh_db
def test_runs_under_the_threshold_together_go_on(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Deleted plus eligible under the threshold: the second run deletes."""
    conn.execute(BIG)
    settings = build_settings(
        {"dsn": dsn},
        tomllib.loads(
            HALVES.replace(
                'retention = "30d"\nafter', 'where = { quarter = 1 }\nretention = "30d"\nafter'
            )
        ),
    )
    sweeps = {s.name: s for s in configured_sweeps(settings)}
    sweeper = Sweeper()
    with Database(connection_settings(settings)) as db:
        first = run_sweep(db, sweeps["half_a"], engine_options(settings), sweeper=sweeper)
        second = run_sweep(db, sweeps["half_b"], engine_options(settings), sweeper=sweeper)
    assert first.rows == 950 and second.outcome == "success" and second.rows == 475
    assert _big(conn) == 475


@pytest.mark.fresh_db
def test_a_busy_table_is_not_refused_for_its_churn(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """10,000 young rows; twelve times, 1,000 old rows arrive and a run deletes them: 12,000
    rows deleted in the window, more than the table ever held, and every run goes on (the
    table keeps 10,000 rows throughout)."""
    conn.execute(
        "CREATE TABLE busy (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL);"
        "INSERT INTO busy (created_at) SELECT now() FROM generate_series(1, 10000);"
    )
    settings = build_settings(
        {"dsn": dsn},
        {
            "sweeps": {
                "busy": {
                    "table": "public.busy",
                    "reason": "old",
                    "retention": "30d",
                    "age": "created_at",
                }
            }
        },
    )
    (sweep,) = [s for s in configured_sweeps(settings) if s.name == "busy"]
    with Database(connection_settings(settings)) as db:
        for _ in range(12):
            conn.execute(
                "INSERT INTO busy (created_at)"
                " SELECT now() - interval '60 days' FROM generate_series(1, 1000);"
                "ANALYZE busy"
            )
            result = run_sweep(db, sweep, engine_options(settings))
            assert result.outcome == "success" and result.rows == 1000, result.error
    got = conn.execute("SELECT count(*) FROM busy").fetchone()
    assert got == (10000,)


@pytest.mark.parametrize("rows_error", [-0.1, -0.03, 0.0, 0.03, 0.1])
@pytest.mark.parametrize("fraction_error", [-0.03, 0.03])
@pytest.mark.parametrize("deleted_before", [0, 5_000])
@pytest.mark.parametrize(("gone", "refused"), [(0.94, False), (0.96, True)])
def test_a_sample_off_either_way_never_lets_a_run_past_the_threshold(
    dsn: str,
    conn: psycopg.Connection[Any],
    rows_error: float,
    fraction_error: float,
    deleted_before: int,
    gone: float,
    refused: bool,
) -> None:
    """A table of 10,000 nodes at the window's start; ``deleted_before`` of them deleted by an
    earlier sweep of the window; the rest eligible so that ``gone`` of the 10,000 would be
    gone after this run. Its block samples project the rows (now and at the window's start)
    up to 10% off either way, and the eligible fraction 3 points off (a sample's eligible
    and sampled rows come from the same blocks: their ratio is what it measures best). Near
    the threshold the judgement counts, and its verdict is that of the true figures."""
    from reaper.engine.clock import compute_cutoffs
    from reaper.engine.interlock import EligibleMeasure, judge_table
    from reaper.engine.interlock import TableWindow as _TableWindow

    start = 10_000
    rows = start - deleted_before
    eligible = round(gone * start) - deleted_before
    _seed(conn, garbage=eligible, keep=rows - eligible)
    settings = build_settings({"dsn": dsn})
    sweep = sweeps_of(settings)["nodes_silent"]
    projected = rows * (1 + rows_error)
    measure = EligibleMeasure({}, projected, projected * min(eligible / rows + fraction_error, 1.0))
    window = _TableWindow(0.0, start * (1 + rows_error), deleted_before)
    with Database(connection_settings(settings)) as db, db.session() as session:
        stmts = session.statements(sweep.predicate)
        params = dict(compute_cutoffs(session, sweep, None))
        if refused:
            with pytest.raises(FullTableRefused):
                judge_table(session, sweep, stmts, params, measure, 0.95, window)
        else:
            judge_table(session, sweep, stmts, params, measure, 0.95, window)

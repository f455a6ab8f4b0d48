"""Failure isolation: one sweep's failure (its table missing, a privilege missing, a timeout, a
lost connection) fails that sweep only. It is logged (``sweep_failed``), counted
(``reaper_sweep_runs_total{outcome="failure"}``), the other sweeps finish, ``run-once`` exits
1, and batches committed before the failure stay deleted and are counted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from reaper.dev import demo
from tests.support import (
    BUILTIN_SWEEPS,
    KEYS,
    SWEEPS,
    Run,
    census,
    login_as,
    run_reaper,
    sample,
    small_sizes,
    textfile_samples,
)

# Every test here changes the schema, grants or settings: a database of its own each.
pytestmark = pytest.mark.fresh_db

ALL = [s.name for s in BUILTIN_SWEEPS]


def check_isolated_failure(
    run: Run, metrics_file: Path, failing: set[str], error_words: tuple[str, ...]
) -> None:
    """run-once exited 1; the failing sweeps failed, were logged and counted; the others
    finished and were counted as successes."""
    assert run.code == 1, run.stderr
    results = {r["sweep"]: r for r in run.json()}
    assert list(results) == ALL
    for name, r in results.items():
        if name in failing:
            assert r["outcome"] == "failure"
            assert all(w in r["error"] for w in error_words), r["error"]
        else:
            assert r["outcome"] == "success", r
    # Every stderr line is a structlog JSON line; one sweep_failed per failing sweep.
    events = run.events()
    failed = [e for e in events if e["event"] == "sweep_failed"]
    finished = [e for e in events if e["event"] == "sweep_finished"]
    assert sorted(e["sweep"] for e in failed) == sorted(failing)
    assert sorted(e["sweep"] for e in finished) == sorted(set(ALL) - failing)
    for e in failed:
        assert e["level"] == "error"
        assert e["table"] == SWEEPS[e["sweep"]].table
        assert all(w in e["error"] for w in error_words), e["error"]
        assert {"rows", "batches", "seconds", "cutoffs"} <= set(e)
    samples = textfile_samples(metrics_file.read_text())
    for name in ALL:
        bad = name in failing
        assert sample(samples, "reaper_sweep_runs_total", sweep=name, outcome="failure") == bad
        assert sample(samples, "reaper_sweep_runs_total", sweep=name, outcome="success") == (
            not bad
        )


def check_swept(dsn: str, tables: set[str], before: dict[str, dict[str, int]]) -> None:
    """Every garbage-* row of ``tables`` went, and every keep-* row stayed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        after = census(conn, tables)
    for table in tables:
        assert after[table] == {"garbage": 0, "keep": before[table]["keep"]}, table


@pytest.mark.parametrize(
    ("table", "failing"),
    [
        ("routers", {"router_leases"}),
        ("nodes", {"nodes_session", "nodes_silent", "nodes_ephemeral"}),
    ],
)
def test_missing_table_fails_only_its_sweeps(dsn, conn, tmp_path, table, failing) -> None:
    demo.seed(dsn, small_sizes())
    before = census(conn)
    conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
    metrics_file = tmp_path / "reaper.prom"
    run = run_reaper(
        "run-once", "--json", "--metrics-file", str(metrics_file), env={"REAPER_DSN": dsn}
    )
    check_isolated_failure(run, metrics_file, failing, (table, "does not exist"))
    check_swept(dsn, set(KEYS) - {table}, before)


@pytest.fixture
def limited_role(dsn: str, conn: psycopg.Connection[Any]) -> Iterator[str]:
    """DSN of a role that may read, lock and delete every table but routers, where it lacks
    DELETE. (Locking a row FOR UPDATE needs UPDATE too.)"""
    role = f"reaper_limited_{uuid.uuid4().hex[:8]}"
    ident = sql.Identifier(role)
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ident))
    try:
        conn.execute(
            sql.SQL(
                "GRANT SELECT, UPDATE, DELETE ON nodes, enrollment_requests, bootstrap_tokens TO {}"
            ).format(ident)
        )
        conn.execute(sql.SQL("GRANT SELECT, UPDATE ON routers TO {}").format(ident))
        yield login_as(dsn, role)
    finally:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(ident))
        conn.execute(sql.SQL("DROP ROLE {}").format(ident))


def test_missing_delete_privilege_fails_only_its_sweep(dsn, conn, limited_role, tmp_path) -> None:
    demo.seed(dsn, small_sizes())
    before = census(conn)
    metrics_file = tmp_path / "reaper.prom"
    run = run_reaper(
        "run-once",
        "--json",
        "--metrics-file",
        str(metrics_file),
        env={"REAPER_DSN": limited_role},
    )
    check_isolated_failure(run, metrics_file, {"router_leases"}, ("routers", "permission denied"))
    check_swept(dsn, set(KEYS) - {"routers"}, before)
    assert census(conn, ["routers"])["routers"] == before["routers"]

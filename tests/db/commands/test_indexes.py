"""`reaper indexes ensure`: concurrent builds, repair of INVALID leftovers, the advisory lock,
lock_timeout, progress from pg_stat_progress_create_index."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from reaper import errors
from reaper.cli import open_database
from reaper.commands import indexes
from reaper.config.settings import build_settings
from reaper.sqltext.sqlinfo import shipped_indexes
from tests.support.ops import index_state, run_cli, run_json, spec


@pytest.mark.fresh_db
def test_dry_run_says_what_it_would_build_and_builds_nothing(
    dsn: str, conn: psycopg.Connection[Any], capsys
) -> None:
    conn.execute("DROP INDEX nodes_session_expires_at_idx")
    code, actions = run_json(capsys, "indexes", "ensure", "--dsn", dsn, "--dry-run")
    assert code == 0
    by_name = {a["index"]: a for a in actions}
    assert set(by_name) == {i.name for i in shipped_indexes()}
    a = by_name["nodes_session_expires_at_idx"]
    assert (a["action"], a["outcome"]) == ("create", "dry_run")
    assert a["statements"] == [
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS nodes_session_expires_at_idx ON public.nodes "
        "(expires_at) WHERE NOT banned"
    ]
    assert {b["action"] for n, b in by_name.items() if n != a["index"]} == {"present"}
    assert index_state(conn, "nodes_session_expires_at_idx") is None

    code, out, _ = run_cli(capsys, "indexes", "ensure", "--dsn", dsn, "--dry-run")
    assert code == 0
    assert "CREATE INDEX CONCURRENTLY IF NOT EXISTS nodes_session_expires_at_idx" in out

    code, actions = run_json(capsys, "indexes", "ensure", "--dsn", dsn)
    assert code == 0
    assert index_state(conn, "nodes_session_expires_at_idx") == (True, True)


def test_a_second_run_waits_for_nobody_it_refuses(
    dsn: str, conn: psycopg.Connection[Any], capsys
) -> None:
    conn.execute("SELECT pg_advisory_lock(%s)", (indexes.LOCK_KEY,))
    code, _, err = run_cli(capsys, "indexes", "ensure", "--dsn", dsn)
    assert code == 1
    assert "another `reaper indexes ensure` holds the advisory lock" in err


@pytest.mark.fresh_db
def test_missing_table_is_skipped(dsn: str, conn: psycopg.Connection[Any], capsys) -> None:
    conn.execute("DROP TABLE routers")
    code, actions = run_json(capsys, "indexes", "ensure", "--dsn", dsn)
    assert code == 0
    routers = [a for a in actions if a["table"] == "routers"]
    assert [(a["action"], a["detail"]) for a in routers] == [
        ("skip", "table routers does not exist")
    ]


@pytest.mark.fresh_db
def test_a_build_that_cannot_get_its_lock_fails_alone_and_leaves_nothing(
    dsn: str, conn: psycopg.Connection[Any], capsys
) -> None:
    conn.execute("DROP INDEX routers_lease_expires_at_idx")
    conn.execute("DROP INDEX bootstrap_tokens_expires_at_idx")
    with psycopg.connect(dsn) as migration:
        migration.execute("LOCK TABLE routers IN ACCESS EXCLUSIVE MODE")
        code, actions = run_json(
            capsys, "indexes", "ensure", "--dsn", dsn, "--lock-timeout", "200ms"
        )
        migration.rollback()
    assert code == 1
    by_name = {a["index"]: a for a in actions}
    failed = by_name["routers_lease_expires_at_idx"]
    assert failed["outcome"] == "failed"
    assert "lock timeout" in failed["error"]
    # The next index was still built; the failed one left no INVALID entry behind.
    assert by_name["bootstrap_tokens_expires_at_idx"]["outcome"] == "done"
    assert index_state(conn, "routers_lease_expires_at_idx") is None
    code, _ = run_json(capsys, "indexes", "ensure", "--dsn", dsn)
    assert code == 0
    assert index_state(conn, "routers_lease_expires_at_idx") == (True, True)


@pytest.mark.fresh_db
def test_build_reports_progress_and_never_blocks_writers(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    conn.execute("DROP INDEX nodes_session_expires_at_idx")
    settings = build_settings({"dsn": dsn})
    phases: list[str] = []
    done: list[list[indexes.IndexAction]] = []
    with psycopg.connect(dsn) as writer, open_database(settings) as db:
        # An open write transaction: the concurrent build must wait for it, not block it.
        writer.execute("INSERT INTO nodes (peer_id, enrolled_at) VALUES ('w1', now())")
        t = threading.Thread(
            target=lambda: done.append(
                indexes.ensure(
                    db,
                    specs=[spec("nodes_session_expires_at_idx")],
                    on_progress=lambda _s, row: phases.append(row.get("phase", "")),
                )
            )
        )
        t.start()
        deadline = time.monotonic() + 30
        while not any(p.startswith("waiting for writers") for p in phases):
            assert time.monotonic() < deadline, phases
            time.sleep(0.05)
        # Writers go on during the build: another insert commits at once.
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute("SET lock_timeout = '2s'")
            other.execute("INSERT INTO nodes (peer_id, enrolled_at) VALUES ('w2', now())")
        writer.commit()
        t.join(30)
    assert [(a.action, a.outcome) for a in done[0]] == [("create", "done")]
    assert index_state(conn, "nodes_session_expires_at_idx") == (True, True)
    assert conn.execute("SELECT count(*) FROM nodes").fetchone() == (2,)


def test_ensure_raises_when_locked(dsn: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT pg_advisory_lock(%s)", (indexes.LOCK_KEY,))
    with open_database(build_settings({"dsn": dsn})) as db, pytest.raises(errors.LockNotAcquired):
        indexes.ensure(db)


@pytest.mark.fresh_db
def test_the_reaper_role_cannot_build_and_is_told_who_can(
    dsn: str, conn: psycopg.Connection[Any], capsys
) -> None:
    from tests.support.ops import apply_grants

    reaper_dsn = apply_grants(dsn)
    conn.execute("DROP INDEX routers_lease_expires_at_idx")
    code, actions = run_json(capsys, "indexes", "ensure", "--dsn", reaper_dsn)
    assert code == 1
    failed = next(a for a in actions if a["index"] == "routers_lease_expires_at_idx")
    assert failed["error"] == (
        "must be owner of table routers (CREATE INDEX is DDL: run `reaper indexes ensure` as "
        "the tables' owner)"
    )

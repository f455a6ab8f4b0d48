"""Helpers for the operator-tool tests: the CLI as a user runs it, the reaper role, and an
index made INVALID the way production makes one."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from reaper import cli, sqltext
from reaper.sqltext.sqlinfo import IndexSpec, shipped_indexes
from tests.support import login_as


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``reaper ARGS`` in-process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        cli.main(list(args))
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), out, err


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    """``reaper ARGS --json``: (exit code, parsed stdout)."""
    code, out, err = run_cli(capsys, *args, "--json")
    assert out.strip(), err
    return code, json.loads(out)


def apply_grants(dsn: str) -> str:
    """Run grants.sql as the tables' owner; return the DSN of the reaper role."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for stmt in sqltext.statements("grants.sql"):
            conn.execute(sql.SQL(stmt))  # type: ignore[arg-type]
    return login_as(dsn, "reaper")


def spec(name: str) -> IndexSpec:
    """The indexes.sql entry called ``name``."""
    return next(i for i in shipped_indexes() if i.name == name)


def index_state(conn: psycopg.Connection[Any], name: str) -> tuple[bool, bool] | None:
    """(indisvalid, indisready) of index ``name``, None when absent."""
    row = conn.execute(
        "SELECT indisvalid, indisready FROM pg_index WHERE indexrelid = to_regclass(%s)", (name,)
    ).fetchone()
    return None if row is None else (row[0], row[1])


def invalid_by_cancel(dsn: str, index: IndexSpec) -> None:
    """Leave ``index`` INVALID as an operator's Ctrl-C (or a deploy timeout) does: a CREATE
    INDEX CONCURRENTLY cancelled midway with pg_cancel_backend.

    The build is held in its "waiting for writers before build" phase by an open transaction
    that holds a write lock on the table; by then its catalog entry (indisvalid = false) is
    committed, and the cancel leaves it behind.
    """
    with (
        psycopg.connect(dsn, autocommit=True) as admin,
        psycopg.connect(dsn) as writer,
        psycopg.connect(dsn, autocommit=True) as builder,
    ):
        admin.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(index.name)))
        writer.execute(
            sql.SQL("LOCK TABLE {} IN ROW EXCLUSIVE MODE").format(sql.Identifier(index.table))
        )
        pid = builder.info.backend_pid
        failed: list[BaseException] = []

        def build() -> None:
            try:
                builder.execute(sql.SQL(index.concurrent_statement))  # type: ignore[arg-type]
            except psycopg.errors.QueryCanceled as exc:
                failed.append(exc)

        t = threading.Thread(target=build)
        t.start()
        deadline = time.monotonic() + 30
        while True:
            row = admin.execute(
                "SELECT phase FROM pg_stat_progress_create_index WHERE pid = %s", (pid,)
            ).fetchone()
            if row and str(row[0]).startswith("waiting for writers"):
                break
            assert time.monotonic() < deadline, "the build never waited for the writer"
            time.sleep(0.05)
        admin.execute("SELECT pg_cancel_backend(%s)", (pid,))
        t.join(30)
        writer.rollback()
        assert failed, "the build was not cancelled"


def invalid_by_failed_unique_build(dsn: str, index: IndexSpec, duplicates_sql: str) -> None:
    """Leave ``index`` INVALID as a migration does when it builds it UNIQUE CONCURRENTLY over
    duplicate values: the build fails in its validation phase and its entry stays behind."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(index.name)))
        conn.execute(sql.SQL(duplicates_sql))  # type: ignore[arg-type]
        unique = index.concurrent_statement.replace("CREATE INDEX", "CREATE UNIQUE INDEX", 1)
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(sql.SQL(unique))  # type: ignore[arg-type]

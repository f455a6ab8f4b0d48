"""Every kind of relation a sweep can name, on a real PostgreSQL, through the CLI.

A batch deletes exactly the rows it selected: each heap the declared table covers (itself,
its inheritance children at any depth, its partitions and sub-partitions, a DEFAULT
partition) is walked on its own, ``FROM ONLY`` that heap, so a tuple id never reaches a row
of another heap. A dry run counts what a real run then deletes, for every strategy. A
relation with no heap reaper can name rows in (a view, a materialized view, a foreign table,
or a table that covers one) is refused before anything runs: exit 2, one line naming the
table and why; ``reaper check`` reports it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from reaper import cli

# Every test here changes the schema, grants or settings: a database of its own each.
pytestmark = pytest.mark.fresh_db

OLD = "now() - interval '60 days'"
FRESH = "now() - interval '1 hour'"


def write_config(tmp_path: Path, table: str, strategy: str = "auto") -> Path:
    path = tmp_path / "reaper.toml"
    path.write_text(
        f"""
[sweeps.events]
table = "{table if "." in table else "public." + table}"
reason = "old"
age = "logged_at"
retention = "30d"
strategy = "{strategy}"
batch_size = 30
"""
    )
    return path


def reaper(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(list(args))
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return (code if isinstance(code, int) else 1), out, err


def ages(conn: psycopg.Connection[Any], relation: str) -> tuple[int, int]:
    """(old rows, fresh rows) of ``relation`` (ONLY: that heap alone)."""
    row = conn.execute(
        f"SELECT count(*) FILTER (WHERE logged_at < now() - interval '30 days'),"
        f" count(*) FILTER (WHERE logged_at >= now() - interval '30 days') FROM ONLY {relation}"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def seed(conn: psycopg.Connection[Any], relation: str, old: int, fresh: int) -> None:
    conn.execute(
        f"INSERT INTO {relation} (id, logged_at)"
        f" SELECT g, {OLD} FROM generate_series(1, %s) g"
        f" UNION ALL SELECT g, {FRESH} FROM generate_series(1, %s) g",
        (old, fresh),
    )


def assert_refused(
    capsys: pytest.CaptureFixture[str], dsn: str, config: Path, table: str, why: str
) -> None:
    for command in (["run-once", "--sweep", "events"], ["run-once", "--sweep", "events",
                                                        "--dry-run"],
                    ["status", "--sweep", "events"]):
        code, out, err = reaper(capsys, *command, "--config", str(config), "--dsn", dsn)
        lines = err.strip().splitlines()
        assert code == 2, (command, out, err)
        assert len(lines) == 1, err
        qualified = table if "." in table else f"public.{table}"
        assert f"table {qualified}" in lines[0] and why in lines[0], lines[0]
    code, out, err = reaper(
        capsys, "check", "--sweep", "events", "--config", str(config), "--dsn", dsn, "--json"
    )
    assert code == 1, (out, err)
    findings = json.loads(out)["findings"]
    failed = [f for f in findings if f["sweep"] == "events" and f["status"] == "fail"]
    assert any(why in f["detail"] for f in failed), failed


def test_a_view_is_refused(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    conn.execute(
        "CREATE TABLE events_base (id bigint, logged_at timestamptz NOT NULL);"
        "CREATE VIEW events AS SELECT * FROM events_base;"
    )
    seed(conn, "events_base", 10, 10)
    config = write_config(tmp_path, "events")
    assert_refused(capsys, dsn, config, "events", "is a view")
    # The daemon refuses to start too (it would otherwise run until stopped).
    proc = subprocess.run(
        [sys.executable, "-m", "reaper", "run", "--listen", "127.0.0.1:0", "--config",
         str(config), "--dsn", dsn],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "reaper: sweep events: table public.events")
    assert ages(conn, "events_base") == (10, 10)



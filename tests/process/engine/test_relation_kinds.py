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

import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.relation_kinds import (
    ages,
    assert_refused,
    seed,
    write_config,
)

# Every test here changes the schema, grants or settings: a database of its own each.
pytestmark = pytest.mark.fresh_db


def test_a_view_is_refused(
    dsn: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
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
        [
            sys.executable,
            "-m",
            "reaper",
            "run",
            "--listen",
            "127.0.0.1:0",
            "--config",
            str(config),
            "--dsn",
            dsn,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("reaper: sweep events: table events")
    assert ages(conn, "events_base") == (10, 10)

"""Helpers that the test_relation_kinds.py files of several layers share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from reaper import cli

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
    for command in (
        ["run-once", "--sweep", "events"],
        ["run-once", "--sweep", "events", "--dry-run"],
        ["status", "--sweep", "events"],
    ):
        code, out, err = reaper(capsys, *command, "--config", str(config), "--dsn", dsn)
        lines = err.strip().splitlines()
        assert code == 2, (command, out, err)
        assert len(lines) == 1, err
        shown = table.removeprefix("public.")
        assert f"table {shown}" in lines[0] and why in lines[0], lines[0]
    code, out, err = reaper(
        capsys, "check", "--sweep", "events", "--config", str(config), "--dsn", dsn, "--json"
    )
    assert code == 1, (out, err)
    findings = json.loads(out)["findings"]
    failed = [f for f in findings if f["sweep"] == "events" and f["status"] == "fail"]
    assert any(why in f["detail"] for f in failed), failed

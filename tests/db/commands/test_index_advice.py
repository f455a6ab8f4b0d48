"""A missing index, told where it matters: `run-once` names each missing or INVALID index a
sweep relies on in one warning line (and still runs), and `check` proposes, for a declared
sweep whose batches scan its table, the statement that builds an index serving them (which
`reaper indexes ensure`, shipping only the built-in sweeps' indexes, never builds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.checks import findings_of
from tests.support.ops import run_cli, run_json, spec


def index_lines(err: str) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in err.splitlines() if x.startswith("{")]
    return [x for x in lines if x["event"] == "index_missing"]


@pytest.mark.fresh_db
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_run_once_names_a_missing_index_in_one_warning_line(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str], dry_run: bool
) -> None:
    args = [
        "--log-format",
        "json",
        "run-once",
        "--dsn",
        dsn,
        "--sweep",
        "nodes_session",
        "--sweep",
        "router_leases",
    ]
    args += ["--dry-run"] if dry_run else []
    code, _, err = run_cli(capsys, *args)
    assert code == 0 and index_lines(err) == [], err
    conn.execute("DROP INDEX nodes_session_expires_at_idx")
    code, _, err = run_cli(capsys, *args)
    assert code == 0, err
    (line,) = index_lines(err)
    assert (line["level"], line["sweep"], line["index"], line["state"], line["fix"]) == (
        "warning",
        "nodes_session",
        "nodes_session_expires_at_idx",
        "does not exist",
        "reaper indexes ensure",
    )
    conn.execute(spec("nodes_session_expires_at_idx").statement)
    code, _, err = run_cli(capsys, *args)
    assert code == 0 and index_lines(err) == [], err


@pytest.mark.fresh_db
@pytest.mark.parametrize(
    ("table", "ages"),
    [("public.ev", ["created_at"]), ('"Odd Events"', ["resolved_at", "created_at"])],
    ids=["one age", "two ages, a quoted table"],
)
def test_check_proposes_the_index_a_declared_sweep_needs(
    dsn: str,
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    table: str,
    ages: list[str],
) -> None:
    conn.execute(
        f"CREATE TABLE {table} (id bigint, resolved_at timestamptz, created_at timestamptz);"
        f"INSERT INTO {table} SELECT g, NULL, now() - (g % 50) * interval '1 day' "
        f"FROM generate_series(1, 20000) g; ANALYZE {table}"
    )
    # The config names a table as schema.name, each part as it is (case and spaces kept).
    name = "public." + table.removeprefix("public.").strip('"')
    config = tmp_path / "reaper.toml"
    config.write_text(
        f"[sweeps.events]\ntable = '{name}'\nreason = \"old\"\n"
        f'age = {json.dumps(ages)}\nretention = "30d"\n'
    )
    args = (
        "check",
        "--dsn",
        dsn,
        "--config",
        str(config),
        "--sweep",
        "events",
        "--seq-scan-max-rows",
        "1000",
    )
    code, doc = run_json(capsys, *args)
    (plan,) = findings_of(doc, check="plan")
    assert (code, plan["status"]) == (1, "fail"), plan
    assert "indexes ensure" not in plan["fix"]
    statements = plan["fix"].split("; ")
    assert len(statements) == len(ages)
    # The fix, run as given, is what the plan needed.
    for statement in statements:
        assert statement.startswith("CREATE INDEX CONCURRENTLY ON ")
        conn.execute(statement)
    conn.execute(f"ANALYZE {table}")
    code, doc = run_json(capsys, *args)
    (plan,) = findings_of(doc, check="plan")
    assert plan["status"] == "pass", plan

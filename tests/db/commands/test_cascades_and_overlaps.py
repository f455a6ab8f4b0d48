"""What a sweep deletes beyond its table, and what two sweeps of one table disagree on, said
before it happens: `check` and the dry run name each ON DELETE CASCADE with its estimated rows,
and `check` names sweeps whose retentions disagree on rows both can match."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.checks import findings_of
from tests.support.ops import run_cli, run_json

SCHEMA = """
CREATE TABLE parents (id bigint PRIMARY KEY, channel text NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON parents (at);
CREATE TABLE kids (id bigint PRIMARY KEY,
                   parent_id bigint NOT NULL REFERENCES parents ON DELETE CASCADE);
CREATE INDEX ON kids (parent_id);
CREATE TABLE grandkids (id bigint PRIMARY KEY,
                        kid_id bigint NOT NULL REFERENCES kids ON DELETE CASCADE);
CREATE INDEX ON grandkids (kid_id);
INSERT INTO parents SELECT g, CASE WHEN g % 10 = 0 THEN 'legal' ELSE 'chat' END,
                           now() - CASE WHEN g <= 1000 THEN interval '40 days'
                                        ELSE interval '1 day' END
                    FROM generate_series(1, 2000) g;
INSERT INTO kids SELECT g, 1 + g % 2000 FROM generate_series(1, 6000) g;
INSERT INTO grandkids SELECT g, 1 + g % 6000 FROM generate_series(1, 12000) g;
ANALYZE parents, kids, grandkids
"""
OFF = "\n".join(
    f"[sweeps.{n}]\nenabled = false"
    for n in (
        "nodes_session",
        "nodes_silent",
        "nodes_ephemeral",
        "router_leases",
        "enrollment_requests",
        "enrollment_requests_ephemeral",
        "bootstrap_tokens",
    )
)
SWEEP = """
[sweeps.old_messages]
table = "public.parents"
reason = "old"
retention = "30d"
age = "at"
max_eligible_fraction = 1
"""
LEGAL = """
[sweeps.legal_hold]
table = "public.parents"
reason = "legal"
retention = "365d"
age = "at"
where = { channel = "legal" }
"""


@pytest.fixture
def tables(conn: psycopg.Connection[Any]) -> None:
    for stmt in SCHEMA.strip().split(";\n"):
        conn.execute(stmt)  # type: ignore[call-overload]


def config(tmp_path: Path, *bodies: str) -> str:
    path = tmp_path / "reaper.toml"
    path.write_text(OFF + "\n" + "".join(bodies))
    return str(path)


@pytest.mark.fresh_db
def test_check_and_the_dry_run_name_the_cascades(
    tables: None, dsn: str, conn: psycopg.Connection[Any], capsys, tmp_path: Path
) -> None:
    cfg = config(tmp_path, SWEEP)
    _, doc = run_json(capsys, "check", "--dsn", dsn, "--config", cfg)
    found = findings_of(doc, check="cascades")
    assert [(f["status"], f["subject"]) for f in found] == [
        ("warn", "ON DELETE CASCADE kids_parent_id_fkey"),
        ("warn", "ON DELETE CASCADE grandkids_kid_id_fkey"),
    ]
    assert "about 3.0 rows per deleted row of kids" in found[0]["detail"]
    assert "about 6.0 rows per deleted row of grandkids (through kids)" in found[1]["detail"]

    code, results = run_json(capsys, "run-once", "--dry-run", "--dsn", dsn, "--config", cfg)
    assert code == 0
    (result,) = results
    assert result["rows"] == 1000
    assert [(c["table"], c["estimated_rows"]) for c in result["cascades"]] == [
        ("kids", 3000),
        ("grandkids", 6000),
    ]
    code, out, _ = run_cli(capsys, "run-once", "--dry-run", "--dsn", dsn, "--config", cfg)
    assert "old_messages: would also delete about 3,000 rows of kids" in " ".join(out.split())
    # What a real run then does: the children go with their parents.
    code, _, _ = run_cli(capsys, "run-once", "--dsn", dsn, "--config", cfg)
    assert code == 0
    assert conn.execute("SELECT count(*) FROM kids").fetchone() == (3000,)
    assert conn.execute("SELECT count(*) FROM grandkids").fetchone() == (6000,)


@pytest.mark.fresh_db
def test_check_names_sweeps_whose_retentions_disagree(
    tables: None, dsn: str, capsys, tmp_path: Path
) -> None:
    code, doc = run_json(capsys, "check", "--dsn", dsn, "--config", config(tmp_path, SWEEP, LEGAL))
    (found,) = [f for f in findings_of(doc, check="overlap") if f["status"] != "pass"]
    assert found["status"] == "fail" and found["sweep"] == "old_messages"
    assert "legal_hold's 365d holds for none of them" in found["detail"]
    assert "where_not" in found["fix"]
    assert code == 1
    # Excluded from the short sweep, the legal rows are the long one's alone.
    fixed = SWEEP + 'where_not = { channel = "legal" }\n'
    _, doc = run_json(capsys, "check", "--dsn", dsn, "--config", config(tmp_path, fixed, LEGAL))
    assert {f["status"] for f in findings_of(doc, check="overlap")} == {"pass"}

"""A name from the database reaches the terminal inert: an index whose name holds ESC, CR,
BEL, a bidirectional override or a newline is shown as its escapes by ``check --wide`` (and
its stacked form, and the log lines), and kept exactly, escaped as JSON escapes, by
``--json``."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.ops import run_cli

pytestmark = pytest.mark.fresh_db

HOSTILE = "evil\x1b[2J\x1b]0;pwned\x07\rBEL\u202eRTL\u2066x\u2069\nfake"
ACTIVE = ("\x1b", "\r", "\x07", "\u202e", "\u2066", "\u2069")


@pytest.fixture
def hostile_index(conn: psycopg.Connection[Any]) -> str:
    """nodes_session's index, built again under a hostile name."""
    conn.execute("DROP INDEX public.nodes_session_expires_at_idx")
    conn.execute(
        sql.SQL("CREATE INDEX {} ON public.nodes (expires_at) WHERE NOT banned").format(
            sql.Identifier(HOSTILE)
        )
    )
    return HOSTILE


@pytest.mark.parametrize("columns", ["300", "60"], ids=["table", "stacked"])
def test_check_wide_prints_an_index_name_inert(
    dsn: str,
    hostile_index: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    columns: str,
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    _, out, err = run_cli(
        capsys,
        "--log-format",
        "console",
        "check",
        "--wide",
        "--dsn",
        dsn,
        "--sweep",
        "nodes_session",
    )
    assert not any(ch in out + err for ch in ACTIVE), repr(out + err)
    assert "evil\\x1b[2J\\x1b]0;pwned" in "".join(out.split())


def test_check_json_keeps_the_name_exactly_and_escaped(
    dsn: str, hostile_index: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run_cli(capsys, "check", "--dsn", dsn, "--sweep", "nodes_session", "--json")
    assert not any(ch in out for ch in ACTIVE)
    texts = [" ".join(str(v) for v in f.values()) for f in json.loads(out)["findings"]]
    assert any(HOSTILE in t for t in texts)

"""`reaper check`'s fixes, pasted as shown, repair the very objects the findings name (a
mixed-case table beside its lower-case namesake, a column in camel case, a role whose name
needs quotes); and no finding says its subject twice."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from reaper.cli import open_database
from reaper.commands import checks
from reaper.config.settings import Settings, build_settings
from tests.support import TEST_DEFAULTS, enabled, login_as

ROLE = "Sweep Ops"
SCHEMA = """
CREATE SCHEMA auth;
CREATE TABLE auth."Session" (id bigint PRIMARY KEY, "expiresAt" timestamp NOT NULL);
CREATE INDEX ON auth."Session" ("expiresAt");
-- The table an unquoted auth.Session would name instead.
CREATE TABLE auth.session (id bigint PRIMARY KEY, "expiresAt" timestamp NOT NULL);
CREATE TABLE auth."Grant" (id bigint PRIMARY KEY,
                           "sessionId" bigint REFERENCES auth."Session" ON DELETE CASCADE);
CREATE TABLE auth."order" (id bigint PRIMARY KEY, created_at timestamptz NOT NULL);
CREATE INDEX ON auth."order" (created_at);
"""
# What each fix is expected to read, by check.
FIXES = {
    "time_zone": 'ALTER TABLE auth."Session" ALTER "expiresAt" TYPE timestamptz USING '
    "\"expiresAt\" AT TIME ZONE 'UTC'",
    "foreign_key_index": 'CREATE INDEX CONCURRENTLY ON auth."Grant" ("sessionId")',
    "privileges": f'GRANT DELETE ON auth."Session" TO "{ROLE}"',
}
STATEMENT = re.compile(r"(ALTER TABLE|CREATE INDEX CONCURRENTLY|GRANT) .*$")


@pytest.fixture
def odd_names(dsn: str, conn: psycopg.Connection[Any]) -> Iterator[str]:
    """The schema above, and a login role ``Sweep Ops`` that may read both tables but delete
    from neither; yields its DSN. The role is dropped afterwards."""
    for stmt in SCHEMA.strip().split(";\n"):
        conn.execute(stmt)  # type: ignore[call-overload]
    role = sql.Identifier(ROLE)
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
    try:
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA auth TO {}").format(role))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA auth TO {}").format(role))
        conn.execute(sql.SQL('GRANT DELETE ON auth."order" TO {}').format(role))
        yield login_as(dsn, ROLE)
    finally:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(role))
        conn.execute(sql.SQL("DROP ROLE {}").format(role))


def _settings(dsn: str, *, builtins: bool = False) -> Settings:
    if builtins:
        return build_settings({"dsn": dsn, **TEST_DEFAULTS})
    return build_settings(
        {"dsn": dsn, **TEST_DEFAULTS},
        {
            "sweeps": {
                name: {"enabled": False}
                for name in ("nodes_session", "nodes_silent", "nodes_ephemeral", "router_leases")
            }
            | {
                name: {"enabled": False}
                for name in ("enrollment_requests", "enrollment_requests_ephemeral")
            }
            | {
                "bootstrap_tokens": {"enabled": False},
                "sessions": {
                    "table": "auth.Session",
                    "reason": "expired",
                    "retention": "30d",
                    "age": "expiresAt",
                },
                "orders": {
                    "table": "auth.order",
                    "reason": "old",
                    "retention": "30d",
                    "age": "created_at",
                },
            }
        },
    )


def _findings(dsn: str, *, builtins: bool = False) -> list[checks.Finding]:
    settings = _settings(dsn, builtins=builtins)
    with open_database(settings) as db:
        return checks.run_checks(db, enabled(settings), settings)


@pytest.mark.fresh_db
def test_a_pasted_fix_repairs_what_the_finding_names(
    odd_names: str, conn: psycopg.Connection[Any]
) -> None:
    found = {
        f.check: f.fix
        for f in _findings(odd_names)
        if f.sweep == "sessions" and f.fix and f.check in FIXES
    }
    for check, statement in FIXES.items():
        assert found.get(check) and statement in str(found[check]), (check, found.get(check))
        m = STATEMENT.search(str(found[check]))
        assert m
        conn.execute(m.group(0))  # type: ignore[call-overload]
    after = [f for f in _findings(odd_names) if f.sweep == "sessions" and f.check in FIXES]
    # Each passes (the time zone check says nothing of a timestamptz column).
    assert {f.status for f in after} == {"pass"}
    assert {f.check for f in after} == set(FIXES) - {"time_zone"}
    # The lower-case namesake was never touched.
    kind = conn.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = 'auth.session'::regclass AND attname = 'expiresAt'"
    ).fetchone()
    assert kind == ("timestamp without time zone",)


@pytest.mark.fresh_db
def test_a_keyword_named_table_is_quoted(odd_names: str) -> None:
    plans = [f for f in _findings(odd_names) if f.sweep == "orders" and f.fix]
    for f in plans:
        assert " auth.order" not in str(f.fix), f


@pytest.mark.fresh_db
def test_no_finding_says_its_subject_twice(odd_names: str, dsn: str) -> None:
    """The line under the table reads ``subject: detail``: the detail never repeats it."""
    findings = _findings(odd_names) + _findings(dsn, builtins=True)
    assert len(findings) > 20
    repeated = [f"{f.check}: {f.subject}: {f.detail}" for f in findings if f.subject in f.detail]
    assert not repeated, "\n".join(repeated)

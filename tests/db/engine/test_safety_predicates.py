"""A declared predicate can only delete by age and can run no code.

Against a real PostgreSQL: a predicate with a branch true regardless of age is refused at
load (exit 2, one line naming the part); a predicate that names a function, operator, type or
relation that could run code is refused by the server's catalog before any statement
evaluates it, in run-once, --dry-run, status, check and the daemon's gauges; the function never
runs (its side effect is asserted absent) and every row stays.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from reaper.config.connection import connection_settings
from reaper.config.settings import build_settings
from reaper.config.sweeps import configured_sweeps
from reaper.daemon.scheduler import Daemon
from tests.support import BUILTIN_SWEEPS, keys

OLD = "now() - interval '90 days'"


def _seed(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at, expires_at, banned) VALUES"
        f" ('garbage-old', {OLD}, NULL, false),"
        f" ('keep-old-banned', {OLD}, NULL, true),"
        " ('keep-young', now() - interval '1 day', NULL, false),"
        " ('keep-young-banned', now() - interval '1 day', NULL, true)"
    )


ALL_NODES = {"garbage-old", "keep-old-banned", "keep-young", "keep-young-banned"}


# -- the rule, from the parse tree -------------------------------------------------------------


# -- the allow-list, from the server's catalog -----------------------------------------------

SETUP = """
CREATE TABLE secrets (id int PRIMARY KEY);
INSERT INTO secrets SELECT generate_series(1, 10);
CREATE TABLE side_effects (what text);
-- Owned by the superuser that runs the tests; EXECUTE is PUBLIC's by default.
CREATE FUNCTION public.innocent(peer text) RETURNS boolean SECURITY DEFINER
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM secrets;
    INSERT INTO side_effects VALUES ('innocent ran');
    RETURN false;
END $$;
CREATE FUNCTION public.is_old(ts timestamptz) RETURNS timestamptz STABLE
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO side_effects VALUES ('is_old ran');
    RETURN ts;
END $$;
CREATE FUNCTION public.noisy_eq(a text, b text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO side_effects VALUES ('noisy_eq ran');
    RETURN a = b;
END $$;
CREATE OPERATOR public.=== (FUNCTION = public.noisy_eq, LEFTARG = text, RIGHTARG = text);
CREATE FUNCTION public.upper(text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO side_effects VALUES ('shadowing upper ran');
    RETURN pg_catalog.upper($1);
END $$;
CREATE FUNCTION public.check_peer(text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO side_effects VALUES ('domain check ran');
    RETURN true;
END $$;
CREATE DOMAIN public.peer AS text CHECK (public.check_peer(VALUE));
CREATE VIEW public.banned_peers AS SELECT peer_id FROM nodes WHERE banned AND innocent(peer_id);
"""


@pytest.fixture
def armed(conn: psycopg.Connection[Any]) -> None:
    _seed(conn)
    conn.execute(SETUP)


def _untouched(conn: psycopg.Connection[Any]) -> None:
    assert [r[0] for r in conn.execute("SELECT what FROM side_effects")] == []
    assert conn.execute("SELECT count(*) FROM secrets").fetchone() == (10,)
    assert keys(conn, "nodes") == ALL_NODES


@pytest.mark.fresh_db
@pytest.mark.usefixtures("armed")
def test_daemon_gauges_refuse_without_evaluating(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    settings = build_settings(
        {"dsn": dsn, "listen": "127.0.0.1:0"},
        {"sweeps": {"members": {
            "table": "nodes", "reason": "stale", "retention": "30d",
            "predicate": "enrolled_at < %(cutoff)s AND NOT innocent(peer_id)",
        }}},
    )
    sweeps = [s for s in configured_sweeps(settings) if s.name == "members"]
    daemon = Daemon(settings, sweeps, registry=CollectorRegistry())
    daemon.db.open()
    try:
        daemon.gauges.refresh()
        result = daemon.run_sweep("members")
    finally:
        daemon.stop(timedelta(seconds=5))
    out = capsys.readouterr()
    assert "backlog_failed" in out.out + out.err
    assert "function innocent(text)" in out.out + out.err
    assert result is not None and result.outcome == "failure"
    assert "function innocent(text)" in (result.error or "")
    _untouched(conn)


def test_builtin_sweeps_pass_the_catalog(dsn: str, make_settings: Callable[..., Any]) -> None:
    from reaper.db import Database
    from reaper.engine.run import check_predicates

    settings = make_settings()
    with Database(connection_settings(settings)) as db:
        check_predicates(db, BUILTIN_SWEEPS)


# -- user types, casts and extensions --------------------------------------------------------



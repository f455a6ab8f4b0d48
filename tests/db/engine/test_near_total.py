"""Near-total deletes and the index path's keyset, on a real PostgreSQL.

- The index path keeps a keyset across a run's batches: each batch starts at the greatest
  age the one before selected. It deletes exactly the garbage: tokens not expired, and
  expired tokens a request references (from before the run or from during it), stay; a
  token that becomes garbage behind the keyset while the run goes is left for the next run.
- A batch's work does not grow with the rows the run already deleted: the buffers the next
  batch's victims read (EXPLAIN ANALYZE, BUFFERS) stay those of the first batch.
- A batch's foreign-key checks keep the server's cached plan (plan_cache_mode back to
  auto inside the batch), while the session's own pin stays force_custom_plan.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from reaper import sqltext
from reaper.config.engine import engine_options
from reaper.config.settings import Settings
from reaper.db import KEYSET_START, BatchRows, Database
from reaper.db.session import Session
from reaper.engine.run import run_sweep
from tests.support import NOW, sweeps_of

TOKENS = 1200
BATCH = 100

# Token i expires i minutes apart, 31 days and more before NOW (garbage: node_retention is 30
# days), in an order that is not the heap's; every tenth is referenced by a live request
# (kept), every seventh is not expired (kept).
SEED = """
INSERT INTO bootstrap_tokens (token_hash, expires_at)
SELECT 'tok-' || i,
       CASE WHEN i %% 7 = 0 THEN %(now)s + interval '1 day'
            ELSE %(now)s - interval '31 days' - ((i * 37) %% %(n)s) * interval '1 minute' END
FROM generate_series(1, %(n)s) AS s (i)
"""
REFERENCE = """
INSERT INTO enrollment_requests (token_id, peer_id, status, created_at)
SELECT id, 'peer-' || id, 'pending', %(now)s - interval '1 hour'
FROM bootstrap_tokens WHERE token_hash = ANY (%(hashes)s)
"""


def seed(conn: psycopg.Connection[Any]) -> tuple[set[str], set[str]]:
    """The tokens; returns ``(garbage, kept)`` by token_hash."""
    conn.execute(SEED, {"now": NOW, "n": TOKENS})
    referenced = [f"tok-{i}" for i in range(1, TOKENS + 1) if i % 10 == 0 and i % 7]
    conn.execute(REFERENCE, {"now": NOW, "hashes": referenced})
    conn.execute("ANALYZE bootstrap_tokens; ANALYZE enrollment_requests")
    kept = {f"tok-{i}" for i in range(1, TOKENS + 1) if i % 7 == 0} | set(referenced)
    garbage = {f"tok-{i}" for i in range(1, TOKENS + 1)} - kept
    return garbage, kept


def tokens(conn: psycopg.Connection[Any]) -> set[str]:
    return {str(r[0]) for r in conn.execute("SELECT token_hash FROM bootstrap_tokens")}


def index_settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(strategy="index", batch_size=BATCH)


def test_keyset_walk_deletes_exactly_the_garbage(
    conn: psycopg.Connection[Any],
    make_settings: Callable[..., Settings],
    database: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    garbage, kept = seed(conn)
    settings = index_settings(make_settings)
    sweep = sweeps_of(settings)["bootstrap_tokens"]
    keysets: list[str | None] = []
    original = Session.delete_index_batch

    def recorded(self: Session, *args: Any, **kwargs: Any) -> BatchRows:
        keysets.append(kwargs.get("keyset"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Session, "delete_index_batch", recorded)
    added: dict[str, str] = {}

    def meanwhile(_: Any) -> None:
        # After the run's third batch: a token that expired before every other (behind the
        # keyset), one that expired after every other (ahead of it), and a request that
        # now references a garbage token the run has not reached yet.
        if len(keysets) != 3:
            return
        conn.execute(
            "INSERT INTO bootstrap_tokens (token_hash, expires_at) VALUES"
            " ('behind', %(now)s - interval '90 days'),"
            " ('ahead', %(now)s - interval '30 days 1 second')",
            {"now": NOW},
        )
        (late,) = conn.execute(
            "SELECT token_hash FROM bootstrap_tokens WHERE token_hash LIKE 'tok-%%'"
            " AND expires_at < %(now)s - interval '30 days' AND NOT EXISTS"
            " (SELECT 1 FROM enrollment_requests r WHERE r.token_id = bootstrap_tokens.id)"
            " ORDER BY expires_at DESC LIMIT 1",
            {"now": NOW},
        ).fetchone() or (None,)
        assert late is not None
        conn.execute(REFERENCE, {"now": NOW, "hashes": [late]})
        added["late"] = str(late)

    first = run_sweep(database, sweep, engine_options(settings), now=NOW, on_batch=meanwhile)

    assert first.outcome == "success", first.error
    assert keysets[0] == KEYSET_START
    # Each batch started past the last: the keys only grow.
    keys = [k for k in keysets[1:] if k is not None]
    assert len(keys) == len(keysets) - 1 and keys == sorted(keys)
    left = tokens(conn)
    assert kept | {added["late"], "behind"} == left
    # Every garbage token but the one referenced meanwhile, and "ahead".
    assert first.rows == len(garbage - {added["late"]}) + 1

    second = run_sweep(database, sweep, engine_options(settings), now=NOW)

    assert second.outcome == "success", second.error
    assert second.rows == 1
    assert tokens(conn) == kept | {added["late"]}


def buffers(conn: psycopg.Connection[Any], stmt: sql.Composed, params: dict[str, Any]) -> int:
    """Shared buffers (hit and read) ``stmt`` reads, run as an index batch plans it (EXPLAIN
    ANALYZE of a read, rolled back)."""
    with conn.transaction(force_rollback=True):
        conn.execute(sql.SQL(sqltext.engine("index_batch_settings")))  # type: ignore[arg-type]
        row = conn.execute(
            sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}").format(stmt), params
        ).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


def test_a_batch_reads_no_more_as_the_run_drains_the_table(
    conn: psycopg.Connection[Any],
    make_settings: Callable[..., Settings],
    database: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not timed: after each batch, the buffers that the next batch's victims read, where
    the run's keyset has reached. An index walk from the front reads every entry of the rows
    deleted before it again (dead, until a vacuum): its last batches read several times what
    its first did."""
    conn.execute(
        "INSERT INTO bootstrap_tokens (token_hash, expires_at)"
        " SELECT 'tok-' || i, %(now)s - interval '40 days' + i * interval '1 second'"
        " FROM generate_series(1, 20000) AS s (i)",
        {"now": NOW},
    )
    conn.execute("ANALYZE bootstrap_tokens")
    settings = make_settings(strategy="index", batch_size=500)
    sweep = sweeps_of(settings)["bootstrap_tokens"]
    cutoff = NOW - timedelta(days=30)
    read: list[int] = []
    original = Session.delete_index_batch

    def measured(
        self: Session, stmts: Any, hs: Any, params: Any, limit: int, *args: Any, **kwargs: Any
    ) -> BatchRows:
        rows = original(self, stmts, hs, params, limit, *args, **kwargs)
        if rows.key is not None and rows.selected == limit:
            assert hs.keyset_victims is not None
            params = {"cutoff": cutoff, "limit": limit, "skip": [], "keyset": rows.key}
            read.append(buffers(conn, hs.keyset_victims, params))
        return rows

    monkeypatch.setattr(Session, "delete_index_batch", measured)

    result = run_sweep(database, sweep, engine_options(settings), now=NOW)

    assert result.outcome == "success", result.error
    assert result.rows == 20000
    assert len(read) >= 30, read
    # The last batches read what the first ones did (give or take an index page or two).
    assert max(read[-5:]) <= max(read[:5]) + 10, read


def test_foreign_key_checks_keep_their_cached_plan_in_a_batch(database: Database) -> None:
    with database.session() as session:
        conn = session._conn
        assert conn.execute("SHOW plan_cache_mode").fetchone() == ("force_custom_plan",)
        with conn.transaction(force_rollback=True):
            conn.execute(
                sql.SQL(sqltext.engine("batch_settings")),  # type: ignore[arg-type]
                {"lock_timeout_ms": 5, "heap_walk": False},
            )
            assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
        assert conn.execute("SHOW plan_cache_mode").fetchone() == ("force_custom_plan",)

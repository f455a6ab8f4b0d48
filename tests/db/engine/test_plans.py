"""The batch statements' plans on tables of 200,000+ rows, mostly live with a few % garbage
(the shape of a control plane after its first sweep): every sweep's index batch is served by
an index on the swept table, never a Seq Scan of it, and the heap walk's batch reads its block
range with a Tid Range Scan.

Slow (about a million rows seeded once for the module): ``pytest -m slow``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from reaper.config.settings import DEFAULT_BATCH_SIZE, Settings, build_settings
from reaper.config.sweeps import Sweep
from reaper.db import ConnectionSettings, Database
from reaper.dev import devserver
from reaper.engine.clock import compute_cutoffs
from tests.support import BUILTIN_SWEEPS, NOW

pytestmark = pytest.mark.slow

ROWS = 200_000
GARBAGE = 6_000  # 3 % of each table

SEED = """
INSERT INTO bootstrap_tokens (token_hash, created_at, expires_at, ephemeral)
SELECT 'live-' || i, %(now)s - interval '10 days', %(now)s + interval '30 days', i %% 10 = 0
FROM generate_series(1, %(live)s) i;

INSERT INTO bootstrap_tokens (token_hash, created_at, expires_at)
SELECT 'expired-' || i, %(now)s - interval '400 days',
       %(now)s - interval '31 days' - (i %% 300) * interval '1 day'
FROM generate_series(1, %(garbage)s) i;

INSERT INTO enrollment_requests (token_id, peer_id, status, created_at, resolved_at)
SELECT 1 + i %% %(live)s, 'recent-' || i, CASE WHEN i %% 2 = 0 THEN 'pending' ELSE 'approved' END,
       %(now)s - (i %% 72) * interval '1 hour',
       CASE WHEN i %% 2 = 0 THEN NULL ELSE %(now)s - (i %% 72) * interval '1 hour' END
FROM generate_series(1, %(live)s) i;

INSERT INTO enrollment_requests (token_id, peer_id, status, created_at, resolved_at)
SELECT CASE WHEN i %% 10 = 0 THEN 10 ELSE %(live)s + 1 + i %% 100 END, 'stale-' || i,
       CASE WHEN i %% 3 = 0 THEN 'pending' ELSE 'rejected' END,
       CASE WHEN i %% 10 = 0 THEN %(now)s - interval '20 hours'
            ELSE %(now)s - (31 + i %% 60) * interval '1 day' END,
       CASE WHEN i %% 3 = 0 THEN NULL WHEN i %% 10 = 0 THEN %(now)s - interval '19 hours'
            ELSE %(now)s - (31 + i %% 60) * interval '1 day' END
FROM generate_series(1, %(garbage)s) i;

INSERT INTO nodes (peer_id, bootstrap_token_id, enrolled_at)
SELECT 'live-' || i, 1, %(now)s - (i %% 1440) * interval '1 minute'
FROM generate_series(1, %(live)s - 15000) i;

INSERT INTO nodes (peer_id, bootstrap_token_id, enrolled_at, banned)
SELECT 'silent-' || i, 1, %(now)s - interval '31 days' - (i %% 29) * interval '1 day', i %% 50 = 0
FROM generate_series(1, %(garbage)s) i;

INSERT INTO nodes (peer_id, enrolled_at, expires_at)
SELECT 'session-live-' || i, %(now)s - interval '1 day', %(now)s + (i %% 48) * interval '1 hour'
FROM generate_series(1, 12000) i;

INSERT INTO nodes (peer_id, enrolled_at, expires_at)
SELECT 'session-lapsed-' || i, %(now)s - interval '60 days',
       %(now)s - interval '73 hours' - (i %% 27) * interval '1 day'
FROM generate_series(1, %(garbage)s) i;

INSERT INTO nodes (peer_id, enrolled_at, ephemeral)
SELECT 'ephemeral-' || i,
       %(now)s - CASE WHEN i %% 2 = 0 THEN interval '3 hours' ELSE interval '5 minutes' END, true
FROM generate_series(1, 3000) i;

INSERT INTO routers (router_id, address, lease_expires_at)
SELECT 'live-' || i, '10.0.0.1:4443', %(now)s + interval '30 seconds'
FROM generate_series(1, %(live)s) i;

INSERT INTO routers (router_id, address, lease_expires_at)
SELECT 'expired-' || i, '10.0.0.2:4443', %(now)s - interval '31 days' - i * interval '1 minute'
FROM generate_series(1, %(garbage)s) i
"""


@pytest.fixture(scope="module")
def big_db(pg_server: str, template_db: str) -> Iterator[Settings]:
    dsn = devserver.create_database(pg_server, template=template_db)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            params = {"now": NOW, "live": ROWS - GARBAGE, "garbage": GARBAGE}
            for stmt in SEED.split(";\n\n"):
                conn.execute(stmt, params)  # type: ignore[call-overload]
            conn.execute("ANALYZE")
            for table in ("nodes", "enrollment_requests", "bootstrap_tokens", "routers"):
                row = conn.execute(
                    sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
                ).fetchone()
                assert row is not None and row[0] >= ROWS, (table, row)
        yield build_settings({"dsn": dsn})
    finally:
        devserver.drop_database(dsn)


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from plan_nodes(child)


def explain(settings: Settings, sweep: Sweep, which: str) -> list[dict[str, Any]]:
    """The plan nodes of the sweep's ``which`` statement (index_batch or heap_batch) in the
    swept table's heap, with the cutoffs of NOW, through reaper's own session settings, planned
    as the batch runs (an index batch after index_batch_settings.sql, a heap batch after
    batch_settings.sql, in one transaction)."""
    db = Database(
        ConnectionSettings(
            dsn=settings.dsn or "",
            statement_timeout=settings.statement_timeout,
            lock_timeout=settings.lock_timeout,
            idle_in_transaction_session_timeout=settings.idle_in_transaction_session_timeout,
        ),
    )
    with db, db.session() as session:
        params: dict[str, Any] = dict(compute_cutoffs(session, sweep, NOW))
        params.update(limit=DEFAULT_BATCH_SIZE, first_tid="(0,0)", end_tid="(64,0)", skip=[])
        stmts = session.statements(sweep.predicate)
        plan = session.explain(
            getattr(stmts.heaps[0], which),
            params,
            index_batch=which == "index_batch",
            heap_batch=which.startswith("heap_"),
        )
    return list(plan_nodes(plan))


def indexes_of(settings: Settings, table: str) -> set[str]:
    with psycopg.connect(str(settings.dsn), autocommit=True) as conn:
        rows = conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", (table,))
        return {r[0] for r in rows}


def describe(nodes: list[dict[str, Any]]) -> str:
    return "; ".join(
        f"{n['Node Type']} {n.get('Relation Name') or n.get('Index Name') or ''}".strip()
        for n in nodes
    )


@pytest.mark.parametrize("sweep", BUILTIN_SWEEPS, ids=lambda s: s.name)
def test_index_batch_uses_an_index_on_the_swept_table(big_db: Settings, sweep: Sweep) -> None:
    nodes = explain(big_db, sweep, "index_batch")
    shape = describe(nodes)
    seq = [n for n in nodes if n["Node Type"] == "Seq Scan"]
    assert not [n for n in seq if n.get("Relation Name") == sweep.table], shape
    used = {n.get("Index Name") for n in nodes if "Index Name" in n}
    assert used & indexes_of(big_db, sweep.table), shape


@pytest.mark.parametrize("which", ["heap_batch", "heap_range_batch"])
@pytest.mark.parametrize("sweep", BUILTIN_SWEEPS, ids=lambda s: s.name)
def test_heap_batch_reads_a_block_range(big_db: Settings, sweep: Sweep, which: str) -> None:
    nodes = explain(big_db, sweep, which)
    shape = describe(nodes)
    on_table = [n for n in nodes if n.get("Relation Name") == sweep.table]
    assert any(n["Node Type"] == "Tid Range Scan" for n in on_table), shape
    assert not any(n["Node Type"] == "Seq Scan" for n in on_table), shape

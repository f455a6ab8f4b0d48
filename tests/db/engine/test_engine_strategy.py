"""How the engine picks its strategy, against a real PostgreSQL: from a sample of the table's
blocks, not the planner's estimate (which a predicate with a subquery parameter throws off by
two orders of magnitude), and whatever it picks, garbage goes and live rows stay.

Sizes are small (20,000 requests, ~200 heap blocks): enough for the sample to see the
difference between a backlog and a trickle. The figures are bench/'s (``make bench``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from reaper.config.engine import engine_options
from reaper.config.settings import Settings
from reaper.db import Database
from reaper.engine.run import run_sweep
from tests.support import sweeps_of

ROWS = 20_000

# Request i is garbage (resolved 60 days ago, key 'go-') when i mod den < num, else live
# (resolved 20 hours ago, key 'stay-'); interleaved in the heap. 'ephemeral' is the one
# ephemeral token, unused, so that the predicate's subquery arm matches nothing but still
# confuses the planner.
SEED = """
INSERT INTO bootstrap_tokens (token_hash, expires_at, ephemeral)
VALUES ('t-live', now() + interval '30 days', false), ('t-eph', now() + interval '1 day', true);
INSERT INTO enrollment_requests (token_id, peer_id, status, created_at, resolved_at)
SELECT (SELECT id FROM bootstrap_tokens WHERE token_hash = 't-live'),
       CASE WHEN i %% %(den)s < %(num)s THEN 'go-' ELSE 'stay-' END || i, 'approved',
       now() - interval '61 days',
       CASE WHEN i %% %(den)s < %(num)s THEN now() - interval '60 days'
            ELSE now() - interval '20 hours' END
FROM generate_series(1, %(rows)s) AS s (i);
ANALYZE enrollment_requests;
"""


def seed(conn: psycopg.Connection[Any], num: int, den: int) -> None:
    for stmt in SEED.split(";\n"):
        if stmt.strip():
            conn.execute(stmt, {"num": num, "den": den, "rows": ROWS})


def left(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE peer_id LIKE 'go-%%'), "
        "count(*) FILTER (WHERE peer_id LIKE 'stay-%%') FROM enrollment_requests"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.parametrize(
    ("num", "den", "strategy"),
    [(2, 3, "heap"), (1, 1000, "index")],
    ids=["backlog-two-thirds", "trickle-0.1pct"],
)
def test_auto_walks_a_backlog_and_follows_the_index_for_a_trickle(
    conn: psycopg.Connection[Any],
    database: Database,
    make_settings: Callable[..., Settings],
    num: int,
    den: int,
    strategy: str,
) -> None:
    seed(conn, num, den)
    garbage = ROWS * num // den
    settings = make_settings(batch_size=1000)
    result = run_sweep(
        database, sweeps_of(settings)["enrollment_requests"], engine_options(settings)
    )
    assert (result.outcome, result.strategy) == ("success", strategy)
    assert result.rows == garbage
    assert left(conn) == (0, ROWS - garbage)


def test_a_forced_strategy_deletes_the_same_rows(
    conn: psycopg.Connection[Any],
    database: Database,
    make_settings: Callable[..., Settings],
) -> None:
    seed(conn, 1, 10)
    settings = make_settings(strategy="index", batch_size=500)
    first = run_sweep(
        database, sweeps_of(settings)["enrollment_requests"], engine_options(settings)
    )
    assert (first.strategy, first.rows, first.batches) == ("index", ROWS // 10, 5)
    assert left(conn) == (0, ROWS - ROWS // 10)
    settings = make_settings(strategy="heap")
    again = run_sweep(
        database, sweeps_of(settings)["enrollment_requests"], engine_options(settings)
    )
    assert (again.strategy, again.rows) == ("heap", 0)

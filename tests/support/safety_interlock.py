"""Helpers that the test_safety_interlock.py files of several layers share."""

from __future__ import annotations

from typing import Any

import psycopg


def _seed(conn: psycopg.Connection[Any], garbage: int, keep: int) -> None:
    """Silent bootstrap members: ``garbage`` 90 days silent, ``keep`` silent for a day."""
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at)"
        " SELECT 'garbage-' || i, now() - interval '90 days' FROM generate_series(1, %s) i",
        (garbage,),
    )
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at)"
        " SELECT 'keep-' || i, now() - interval '1 day' FROM generate_series(1, %s) i",
        (keep,),
    )


def _count(conn: psycopg.Connection[Any], prefix: str) -> int:
    row = conn.execute("SELECT count(*) FROM nodes WHERE peer_id LIKE %s", (prefix + "%",))
    got = row.fetchone()
    assert got is not None
    return int(got[0])


BIG = """
CREATE TABLE big (
    id int PRIMARY KEY, created_at timestamptz NOT NULL,
    parity int GENERATED ALWAYS AS (id % 2) STORED,
    quarter int GENERATED ALWAYS AS (id % 4) STORED,
    part text GENERATED ALWAYS AS
        (CASE WHEN id <= 950 THEN 'first' WHEN id <= 1860 THEN 'rest' ELSE 'last' END) STORED
);
INSERT INTO big SELECT i, now() - interval '60 days' FROM generate_series(1, 1900) i;
ANALYZE big;
"""


HALVES = """
[sweeps.half_a]
table = "public.big"
reason = "old"
age = "created_at"
where = { parity = 0 }
retention = "30d"

[sweeps.half_b]
table = "public.big"
reason = "old"
age = "created_at"
retention = "30d"
after = ["half_a"]
"""


def _big(conn: psycopg.Connection[Any]) -> int:
    got = conn.execute("SELECT count(*) FROM big").fetchone()
    assert got is not None
    return int(got[0])

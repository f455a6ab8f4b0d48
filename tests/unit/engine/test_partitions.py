"""Partition retention on a real PostgreSQL: partitions whose bounds prove every row past the
cutoff are dropped whole, the rest is swept row by row, and nothing the retention keeps goes.

Row keys say what must happen: ``go-*`` rows must be gone afterwards, ``stay-*`` rows must
survive. The clock is pinned (``now=NOW``) so every cutoff is exact.
"""

from __future__ import annotations

import pytest

from reaper.engine.partitions import NotProven, key_bound

# -- the proof: pure, no database ----------------------------------------------------------


@pytest.mark.parametrize(
    "predicate",
    [
        "created_at < %(cutoff)s",
        "created_at <= %(cutoff)s",
        "%(cutoff)s > created_at",
        "(events.created_at < %(cutoff)s)",
        "created_at < %(cutoff)s AND created_at <= %(other)s",
        "created_at OPERATOR(pg_catalog.<) %(cutoff)s",
    ],
)
def test_a_bound_of_one_column_is_proven(predicate: str) -> None:
    assert key_bound("events", predicate).column == "created_at"


@pytest.mark.parametrize(
    "predicate",
    [
        "created_at < %(cutoff)s OR status = 'failed'",
        "created_at < %(cutoff)s OR updated_at < %(cutoff)s",
        "created_at < %(cutoff)s AND status = 'done'",
        "created_at < %(cutoff)s AND updated_at < %(cutoff)s",
        "NOT (created_at >= %(cutoff)s)",
        "created_at::date < %(cutoff)s",
        "date_trunc('day', created_at) < %(cutoff)s",
        "created_at < %(cutoff)s - interval '1 day'",
        "created_at > %(cutoff)s",
        "created_at BETWEEN '2000-01-01' AND %(cutoff)s",
        "created_at < %(cutoff)s AND EXISTS (SELECT 1 FROM other)",
        "other.created_at < %(cutoff)s",
        "created_at OPERATOR(public.<) %(cutoff)s",
        "coalesce(resolved_at, created_at) < %(cutoff)s",
    ],
)
def test_anything_else_proves_nothing(predicate: str) -> None:
    with pytest.raises(NotProven):
        key_bound("events", predicate)


# -- dropping -------------------------------------------------------------------------------

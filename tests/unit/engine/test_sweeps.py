"""Each sweep on a real PostgreSQL: rows past the cutoff go, rows inside it stay, the boundary
holds one second either side, and banned members stay.

The clock is pinned (``run_sweep(now=NOW)``) so cutoffs are exact. Row keys say what the sweep
must do with them: ``go-*`` rows must be deleted, ``stay-*`` rows must survive. Every test runs
with both strategies (heap walk, index batches), which must agree row for row.
"""

from __future__ import annotations

from reaper.config.sweeps import select
from tests.support import (
    BUILTIN_SWEEPS,
)


def test_requests_are_swept_before_tokens() -> None:
    """Whatever order they are asked for in, requests come first (a request holds a foreign
    key to its token)."""
    requests = ["enrollment_requests", "enrollment_requests_ephemeral"]
    for names in (
        ["bootstrap_tokens", *requests],
        [*requests, "bootstrap_tokens"],
        ["bootstrap_tokens", requests[1], requests[0]],
        [],
    ):
        order = [s.name for s in select(BUILTIN_SWEEPS, names)]
        for name in requests:
            assert order.index(name) < order.index("bootstrap_tokens"), names

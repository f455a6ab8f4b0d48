"""Helpers that the test_metrics.py files of several layers share."""

from __future__ import annotations

from reaper.dev import demo
from tests.support import (
    BUILTIN_SWEEPS,
    small_sizes,
)

REASONS = sorted({(s.table, s.reason) for s in BUILTIN_SWEEPS})


def expected_deletions() -> dict[tuple[str, str], int]:
    """Rows each (table, reason) must delete from ``small_sizes()``'s seed."""
    z = small_sizes()
    return {
        ("nodes", "session"): z.nodes_session_lapsed,
        ("nodes", "silent"): z.nodes_silent,
        ("nodes", "ephemeral"): z.nodes_ephemeral_silent,
        ("enrollment_requests", "stale"): z.requests_stale - demo.ephemeral_requests(z),
        ("enrollment_requests", "ephemeral"): demo.ephemeral_requests(z),
        ("bootstrap_tokens", "expired"): z.tokens_expired_old - z.tokens_expired_old_referenced,
        ("routers", "expired"): z.routers_expired,
    }

"""Helpers that the test_custom_sweeps_config.py files of several layers share."""

from __future__ import annotations

NOWHERE = "postgresql://reaper@127.0.0.1:1/nowhere?connect_timeout=1"


SQL_TEXT = "[sweeps.t] predicate: SQL text is no longer accepted"


def legacy(predicate: str) -> str:
    """A former release's declaration: SQL text."""
    return (
        f'[sweeps.t]\ntable = "public.token"\nreason = "stale"\npredicate = """{predicate}"""\n'
        'retention = "30d"\n'
    )


def declared(body: str, extra: str = "") -> str:
    """A declared sweep ``t`` on public.token with ``body`` as its rule keys."""
    return f'[sweeps.t]\ntable = "public.token"\nreason = "stale"\n{body}\n{extra}\n'

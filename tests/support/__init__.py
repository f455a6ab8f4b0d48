"""Helpers shared by the tests: a pinned clock, row builders, and the real ``reaper`` command.

Rows are built relative to :data:`NOW`, which the tests pass to ``run_sweep(now=NOW)`` so that
every cutoff is exact (``NOW - retention``) and no test sleeps or races the wall clock.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from reaper.config.load import Config
from reaper.config.settings import Settings, build_settings
from reaper.config.sweeps import Sweep, by_name, configured_sweeps
from reaper.dev import demo

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
# What the engine tests run with unless a test says otherwise: the full-table interlock off
# (they empty whole tables on purpose) and no pause for live traffic (the test's own seeding
# connection is live traffic to the pacer). tests/conftest.py's make_settings starts here too.
TEST_DEFAULTS = {"max_eligible_fraction": "1", "busy_share": "1"}


def sweeps_of(settings: Settings) -> dict[str, Sweep]:
    """Every sweep ``settings`` configure, resolved, by name."""
    return by_name(configured_sweeps(settings))


def enabled(settings: Settings, names: tuple[str, ...] | list[str] = ()) -> list[Sweep]:
    """The sweeps run-once would run with ``settings`` and ``--sweep names``."""
    return Config(settings, tuple(configured_sweeps(settings))).enabled(names)


# The built-in sweeps at the tests' defaults, by name and in order.
SWEEPS: dict[str, Sweep] = sweeps_of(build_settings(TEST_DEFAULTS))
BUILTIN_SWEEPS: tuple[Sweep, ...] = tuple(SWEEPS.values())

# Each table's key column (the demo's convention: keys say garbage-* or keep-*).
KEYS = demo.KEYS


def add_node(
    conn: psycopg.Connection[Any],
    peer_id: str,
    *,
    enrolled_at: datetime,
    expires_at: datetime | None = None,
    banned: bool = False,
    ephemeral: bool = False,
) -> None:
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at, expires_at, banned, ephemeral)"
        " VALUES (%s, %s, %s, %s, %s)",
        (peer_id, enrolled_at, expires_at, banned, ephemeral),
    )


def add_token(
    conn: psycopg.Connection[Any], token_hash: str, *, expires_at: datetime, ephemeral: bool = False
) -> int:
    row = conn.execute(
        "INSERT INTO bootstrap_tokens (token_hash, created_at, expires_at, ephemeral)"
        " VALUES (%s, %s, %s, %s) RETURNING id",
        (token_hash, expires_at - timedelta(days=400), expires_at, ephemeral),
    ).fetchone()
    assert row is not None
    return int(row[0])


def add_request(
    conn: psycopg.Connection[Any],
    peer_id: str,
    *,
    token_id: int | None,
    created_at: datetime,
    resolved_at: datetime | None = None,
) -> None:
    status = "pending" if resolved_at is None else "approved"
    conn.execute(
        "INSERT INTO enrollment_requests (token_id, peer_id, status, created_at, resolved_at)"
        " VALUES (%s, %s, %s, %s, %s)",
        (token_id, peer_id, status, created_at, resolved_at),
    )


def add_router(
    conn: psycopg.Connection[Any], router_id: str, *, lease_expires_at: datetime
) -> None:
    conn.execute(
        "INSERT INTO routers (router_id, address, lease_expires_at) VALUES (%s, %s, %s)",
        (router_id, "10.0.0.1:4443", lease_expires_at),
    )


def keys(conn: psycopg.Connection[Any], table: str) -> set[str]:
    """Every key of ``table`` (see :data:`KEYS`)."""
    return {str(r[0]) for r in conn.execute(f"SELECT {KEYS[table]} FROM {table}")}


# Rows per table (all four by default), split into garbage-* and keep-* keys.
census = demo.count_kinds


# libpq's credentials name no database, so every process a test starts keeps them: a server
# that asks for a password gets it from PGPASSWORD or the password file (PGPASSFILE, else
# ~/.pgpass, found through HOME), as the test's own connections do.
CREDENTIAL_VARIABLES = ("PGPASSWORD", "PGPASSFILE", "HOME")


def credentials() -> dict[str, str]:
    """The test's own libpq credential variables (see CREDENTIAL_VARIABLES)."""
    return {k: os.environ[k] for k in CREDENTIAL_VARIABLES if k in os.environ}


# The password of the roles tests create and log in as (reaper's own, limited ones): fixed,
# so that tests running at once never race to change it. Needed where the server asks for a
# password; harmless where it trusts.
TEST_ROLE_PASSWORD = "reaper-test-role"


def login_as(dsn: str, role: str) -> str:
    """``dsn`` logging in as ``role``, whose password this sets (as ``dsn``'s user, who may)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(TEST_ROLE_PASSWORD)
            )
        )
    return make_conninfo(dsn, user=role, password=TEST_ROLE_PASSWORD)


def reaper_executable() -> str:
    """The ``reaper`` console script installed beside this interpreter."""
    found = shutil.which("reaper", path=str(Path(sys.executable).parent))
    assert found, "the reaper entry point is not installed (pip install -e .)"
    return found


@dataclass
class Run:
    """A finished ``reaper`` process."""

    code: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]

    def events(self) -> list[dict[str, Any]]:
        """The structlog JSON lines on stderr (every line must be JSON)."""
        return [json.loads(line) for line in self.stderr_lines]

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_reaper(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 60
) -> Run:
    """Run the real ``reaper`` entry point in a subprocess, with no REAPER_* or PG* variables
    from the test's own environment (only those in ``env``) but its libpq credentials
    (:func:`credentials`). stderr is a pipe, not a terminal, so logs are JSON lines."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REAPER_", "PG")) and k != "COLUMNS"
    } | credentials()
    proc = subprocess.run(
        [reaper_executable(), *args],
        env={**base, **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def textfile_samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus text-format document, by (name, labels), parsed with
    prometheus-client's own parser (which raises on a malformed document)."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, frozenset(s.labels.items())] = s.value
    return out


def sample(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float | None:
    """One sample of :func:`textfile_samples`' result (None when absent)."""
    return samples.get((name, frozenset(labels.items())))


def small_sizes() -> Any:
    """The demo's mix of garbage, live and banned rows at a few hundred rows in all."""
    from reaper.dev.demo import Sizes

    return Sizes(
        requests_stale=300,
        requests_recent=20,
        nodes_silent=300,
        nodes_silent_banned=5,
        nodes_live=20,
        nodes_session_lapsed=100,
        nodes_session_kept=10,
        nodes_ephemeral_silent=50,
        nodes_ephemeral_live=10,
        tokens_live=9,
        tokens_expired_old=30,
        tokens_expired_old_referenced=5,
        tokens_expired_recent=4,
        routers_live=5,
        routers_expired=20,
    )


# The password of the password_server fixture's cluster (tests/process/conftest.py).
PASSWORD = "s3cret-for-tests"

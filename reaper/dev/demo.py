"""``make demo``: the testnet audit's garbage, swept by ``reaper run-once``.

Starts a PostgreSQL (``REAPER_DSN`` if set, else an embedded pgserver kept in ``.demo-pg/``),
creates a fresh ``reaper_demo`` database (``REAPER_DEMO_DATABASE`` names another) with the
reference schema, seeds the garbage the audit found at its real sizes mixed with live and
banned rows, runs ``reaper run-once`` as a user would, checks that every garbage row went and
every live and banned row stayed, and prints the commands to try next. ``--serve``
(``make demo-server``) seeds the database again and keeps the server up for them.

Every seeded row's key says what it is (``garbage-`` / ``keep-``), so the check needs no
knowledge of the sweeps' rules.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from reaper.dev import devserver

DEMO_DATABASE = "reaper_demo"


@dataclass(frozen=True)
class Sizes:
    """Rows seeded per kind. Defaults: the testnet audit's figures."""

    requests_stale: int = 99_690  # 99,990 requests in all, "all stale but a few hundred"
    requests_recent: int = 300
    nodes_silent: int = 100_000  # ~100,000 node rows left by scale tests
    nodes_silent_banned: int = 50
    nodes_live: int = 2_000
    nodes_session_lapsed: int = 19_307  # of 19,601 session nodes
    nodes_session_kept: int = 294
    nodes_ephemeral_silent: int = 3_000
    nodes_ephemeral_live: int = 200
    tokens_live: int = 9  # of 325
    tokens_expired_old: int = 300
    tokens_expired_old_referenced: int = 5
    tokens_expired_recent: int = 16
    routers_live: int = 13  # of 290
    routers_expired: int = 277


# One statement per kind of row. Keys: garbage-* must go, keep-* must stay.
SEED = """
INSERT INTO bootstrap_tokens (token_hash, description, created_at, expires_at, ephemeral)
SELECT 'keep-live-' || i, 'live token', now() - interval '10 days',
       now() + interval '30 days', i % 3 = 0
FROM generate_series(1, %(tokens_live)s) i;

INSERT INTO bootstrap_tokens (token_hash, description, created_at, expires_at)
SELECT 'garbage-expired-' || i, 'expired long ago', now() - interval '400 days',
       now() - (31 + i % 300) * interval '1 day'
FROM generate_series(1, %(tokens_expired_old)s - %(tokens_expired_old_referenced)s) i;

-- Expired long ago, but a recent (rejected) request still references them: they stay.
INSERT INTO bootstrap_tokens (token_hash, description, created_at, expires_at)
SELECT 'keep-referenced-' || i, 'expired, still referenced', now() - interval '400 days',
       now() - interval '90 days'
FROM generate_series(1, %(tokens_expired_old_referenced)s) i;

INSERT INTO bootstrap_tokens (token_hash, description, created_at, expires_at)
SELECT 'keep-expired-recently-' || i, 'expired within the retention',
       now() - interval '40 days', now() - (1 + i) * interval '1 day'
FROM generate_series(1, %(tokens_expired_recent)s) i;

-- Stale requests, interleaved in the heap: resolved long ago, pending long ago, and resolved
-- hours ago for an ephemeral token (the ephemeral retention applies).
INSERT INTO enrollment_requests (token_id, peer_id, status, created_at, resolved_at)
SELECT CASE WHEN i % 10 = 0 THEN (SELECT min(id) FROM bootstrap_tokens WHERE ephemeral)
            ELSE (SELECT min(id) FROM bootstrap_tokens WHERE token_hash LIKE 'garbage-%')
                 + i % (%(tokens_expired_old)s - %(tokens_expired_old_referenced)s) END,
       'garbage-request-' || i,
       CASE i % 3 WHEN 0 THEN 'pending' WHEN 1 THEN 'approved' ELSE 'rejected' END,
       CASE WHEN i % 10 = 0 THEN now() - interval '20 hours'
            ELSE now() - (31 + i % 60) * interval '1 day' END,
       CASE WHEN i % 10 = 0 THEN now() - interval '19 hours'
            WHEN i % 3 = 0 THEN NULL
            ELSE now() - (31 + i % 60) * interval '1 day' + interval '1 minute' END
FROM generate_series(1, %(requests_stale)s) i;

INSERT INTO enrollment_requests (token_id, peer_id, status, created_at, resolved_at)
SELECT CASE WHEN i <= %(tokens_expired_old_referenced)s
            THEN (SELECT id FROM bootstrap_tokens WHERE token_hash = 'keep-referenced-' || i)
            ELSE (SELECT min(id) FROM bootstrap_tokens WHERE token_hash LIKE 'keep-live-%') END,
       'keep-request-' || i,
       CASE WHEN i <= %(tokens_expired_old_referenced)s THEN 'rejected'
            WHEN i % 2 = 0 THEN 'pending' ELSE 'approved' END,
       now() - (i % 72) * interval '1 hour',
       CASE WHEN i % 2 = 0 AND i > %(tokens_expired_old_referenced)s THEN NULL
            ELSE now() - (i % 72) * interval '1 hour' + interval '5 minutes' END
FROM generate_series(1, %(requests_recent)s) i;

-- Bootstrap members silent 31-60 days (scale tests), some banned; live ones heard from lately.
INSERT INTO nodes (peer_id, bootstrap_token_id, enrolled_at)
SELECT 'garbage-silent-' || i, 1, now() - interval '31 days' - (i % 29) * interval '1 day'
FROM generate_series(1, %(nodes_silent)s) i;

INSERT INTO nodes (peer_id, bootstrap_token_id, enrolled_at, banned)
SELECT 'keep-banned-' || i, 1, now() - interval '45 days', true
FROM generate_series(1, %(nodes_silent_banned)s) i;

INSERT INTO nodes (peer_id, bootstrap_token_id, enrolled_at)
SELECT 'keep-live-' || i, 1, now() - (i % 1440) * interval '1 minute'
FROM generate_series(1, %(nodes_live)s) i;

-- Members with a session: lapsed 4-30 days ago (garbage), or active / lapsed within 72 h.
INSERT INTO nodes (peer_id, enrolled_at, expires_at)
SELECT 'garbage-session-' || i, now() - interval '60 days',
       now() - interval '73 hours' - (i % 27) * interval '1 day'
FROM generate_series(1, %(nodes_session_lapsed)s) i;

INSERT INTO nodes (peer_id, enrolled_at, expires_at)
SELECT 'keep-session-' || i, now() - interval '1 day',
       now() + (i % 48 - 24) * interval '1 hour'
FROM generate_series(1, %(nodes_session_kept)s) i;

-- Ephemeral members (CI runners): silent for hours, or live.
INSERT INTO nodes (peer_id, bootstrap_token_id, enrolled_at, ephemeral)
SELECT 'garbage-ephemeral-' || i, 3, now() - interval '2 hours' - (i % 10) * interval '1 hour', true
FROM generate_series(1, %(nodes_ephemeral_silent)s) i;

INSERT INTO nodes (peer_id, bootstrap_token_id, enrolled_at, ephemeral)
SELECT 'keep-ephemeral-' || i, 3, now() - (i % 30) * interval '1 minute', true
FROM generate_series(1, %(nodes_ephemeral_live)s) i;

INSERT INTO routers (router_id, address, lease_expires_at, updated_at)
SELECT 'keep-router-' || i, '10.0.0.' || i || ':4443', now() + interval '30 seconds', now()
FROM generate_series(1, %(routers_live)s) i;

INSERT INTO routers (router_id, address, lease_expires_at, updated_at)
SELECT 'garbage-router-' || i, '10.1.' || i / 250 || '.' || i % 250 || ':4443',
       now() - interval '31 days' - i * interval '12 hours', now() - interval '32 days'
FROM generate_series(1, %(routers_expired)s) i;
"""

# Each table's key column, to tell garbage-* from keep-* rows.
KEYS = {
    "nodes": "peer_id",
    "enrollment_requests": "peer_id",
    "bootstrap_tokens": "token_hash",
    "routers": "router_id",
}


def ephemeral_requests(sizes: Sizes) -> int:
    """How many of the stale requests SEED writes are of an ephemeral token (one in ten,
    resolved 19 hours ago): ``enrollment_requests_ephemeral``'s rows; the rest of
    ``requests_stale`` are ``enrollment_requests``'."""
    return sizes.requests_stale // 10


def seed(dsn: str, sizes: Sizes | None = None) -> None:
    """Insert the audit's rows into the (empty) reference schema at ``dsn``, then ANALYZE, as
    autovacuum would have done on a table this old."""
    params = vars(sizes or Sizes())
    with psycopg.connect(dsn, autocommit=True) as conn:
        for stmt in SEED.split(";\n\n"):
            if stmt.strip():
                # SEED writes % plainly (modulo, LIKE); psycopg wants %% beside %(name)s.
                conn.execute(re.sub(r"%(?!\()", "%%", stmt), params)
        conn.execute("ANALYZE")


def census(dsn: str) -> dict[str, dict[str, int]]:
    """Rows per table, split into garbage (must go) and keep (must stay)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return count_kinds(conn)


def count_kinds(
    conn: psycopg.Connection[Any], tables: Iterable[str] = KEYS
) -> dict[str, dict[str, int]]:
    """:func:`census` on an open connection, for ``tables`` (all four by default)."""
    out = {}
    for table in tables:
        key = KEYS[table]
        row = conn.execute(
            f"SELECT count(*) FILTER (WHERE {key} LIKE 'garbage-%'),"
            f" count(*) FILTER (WHERE {key} LIKE 'keep-%') FROM {table}"
        ).fetchone()
        assert row is not None
        out[table] = {"garbage": int(row[0]), "keep": int(row[1])}
    return out


def _print_census(title: str, counts: dict[str, dict[str, int]]) -> None:
    print(f"\n{title}")
    print(f"  {'table':<22}{'garbage':>10}{'keep':>10}")
    for table, c in counts.items():
        print(f"  {table:<22}{c['garbage']:>10,}{c['keep']:>10,}")


def _shown(path: Path) -> str:
    """``path`` as the user would type it from the current directory."""
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else str(path)


def write_env_file(root: Path, dsn: str) -> Path:
    """Write ``root/reaper.env``, a shell file that exports ``REAPER_DSN=dsn`` (mode 0600: a
    DSN may hold a password); return its path."""
    path = root / "reaper.env"
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"export REAPER_DSN={shlex.quote(dsn)}\n")
    return path


def next_steps(env_file: Path, *, serving: bool) -> str:
    """The commands to type next, exactly (the README shows the same ones).

    Args:
        env_file: the file :func:`write_env_file` wrote.
        serving: True when the demo's server stays up until Ctrl-C (``--serve``); False at the
            end of ``make demo``, whose embedded server (if any) has stopped.
    """
    reaper = _shown(Path(sys.executable).parent / "reaper")
    lines = []
    if not serving:
        lines += [
            "Next: keep the demo's server up (re-seeded) in this terminal:",
            "  make demo-server            # Ctrl-C stops it",
            "and in another terminal:",
        ]
    else:
        lines += ["In another terminal:"]
    lines += [
        f"  source {_shown(env_file)}",
        f"  {reaper} status",
        f"  {reaper} check    # exits 1: the demo connects as a superuser (check role)",
        f"  {reaper} run-once --dry-run",
        f"  {reaper} run --listen 127.0.0.1:9465 --interval 1m --max-eligible-fraction 1",
        "and from a third one:",
        "  curl -s 127.0.0.1:9465/metrics | grep '^reaper_deleted_rows_total'",
        f"(`source {_shown(Path(sys.executable).parent / 'activate')}` puts reaper on your PATH.)",
    ]
    return "\n".join(lines)


def prepare(server_dsn: str, root: Path) -> str:
    """Create the demo database afresh on ``server_dsn``'s server, load the schema, seed it,
    write the env file, and return the database's DSN."""
    name = os.environ.get("REAPER_DEMO_DATABASE") or DEMO_DATABASE
    devserver.drop_database(devserver.with_dbname(server_dsn, name))
    dsn = devserver.create_database(server_dsn, name)
    devserver.load_schema(dsn)
    t0 = time.monotonic()
    seed(dsn)
    print(f"seeded the audit's rows in {time.monotonic() - t0:.1f}s (database {name})")
    write_env_file(root, dsn)
    return dsn


def serve(root: Path) -> int:
    """``make demo-server``: the demo's database, seeded, on a server kept up until Ctrl-C or
    SIGTERM; exit code 0."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with devserver.server("REAPER_DSN", data_dir=root) as server_dsn:
        prepare(server_dsn, root)
        _print_census(
            "rows",
            census(
                devserver.with_dbname(
                    server_dsn, os.environ.get("REAPER_DEMO_DATABASE") or DEMO_DATABASE
                )
            ),
        )
        print("\nThe demo's PostgreSQL is up; Ctrl-C stops it.\n")
        print(next_steps(root / "reaper.env", serving=True), flush=True)
        stop.wait()
    print("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the demo; exit code 0 when the garbage went and every kept row stayed.
    ``--serve``: see :func:`serve`."""
    argv = sys.argv[1:] if argv is None else argv
    root = Path(os.environ.get("REAPER_DEMO_DIR", ".demo-pg")).resolve()
    if "--serve" in argv:
        return serve(root)
    with devserver.server("REAPER_DSN", data_dir=root) as server_dsn:
        dsn = prepare(server_dsn, root)
        before = census(dsn)
        _print_census("before", before)
        metrics_file = root / "reaper.prom"
        # The audit's requests are 99.7% garbage: more than the full-table interlock lets a
        # run delete unless told (docs/safety.md), which a first cleanup of a backlog is.
        # Warnings only: the table says what each sweep did (without the flag, a line per sweep
        # on stderr says it again).
        cmd = [
            "reaper",
            "--log-level",
            "warning",
            "run-once",
            "--max-eligible-fraction",
            "1",
            "--metrics-file",
            str(metrics_file),
        ]
        print("\n$ " + " ".join(cmd))
        # The reaper script installed beside this interpreter (the virtual environment's).
        cmd[0] = shutil.which("reaper", path=str(Path(sys.executable).parent)) or "reaper"
        sys.stdout.flush()
        env = dict(os.environ, REAPER_DSN=dsn)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, env=env, check=False)
        print(f"run-once exited {proc.returncode} after {time.monotonic() - t0:.2f}s")
        after = census(dsn)
        _print_census("after", after)
        print("\ndeletion counters (reaper_deleted_rows_total):")
        for line in metrics_file.read_text().splitlines():
            if line.startswith("reaper_deleted_rows_total"):
                print("  " + line)
    ok = proc.returncode == 0
    for table, c in after.items():
        if c["garbage"]:
            print(f"FAIL: {c['garbage']} garbage rows left in {table}")
            ok = False
        if c["keep"] != before[table]["keep"]:
            print(f"FAIL: {before[table]['keep'] - c['keep']} live rows deleted from {table}")
            ok = False
    if ok:
        print("\nOK: every garbage row went, every live and banned row stayed.\n")
        print(next_steps(root / "reaper.env", serving=False))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

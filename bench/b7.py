"""B7: partition retention. A table of 24 monthly partitions, rows spread evenly over two years,
retention 180 days; on identical copies:

(a) one plain ``DELETE FROM events WHERE created_at < cutoff``;
(b) reaper's row sweep of the table (``partition_action = off``);
(c) reaper's sweep (``partition_action = drop``): the partitions wholly past the cutoff
    dropped, the boundary partition swept row by row.

Each variant is measured for wall time, WAL written (``pg_current_wal_lsn()`` before and
after), dead tuples left (``pg_stat_user_tables.n_dead_tup``) and the latency of two writers
inserting into the newest partition meanwhile (p50/p99). Every variant must leave the rows
at or after the cutoff exactly as they were (count and a hash of every column), and none
before it. The clock is pinned: every variant uses the same cutoff.

``python -m bench --only B7`` (10,000,000 rows), or ``python -m bench.b7 --rows 1000000``
for a quick run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench import report
from bench.pg import Server, connect, wal_and_checkpoints
from bench.variants import Run, percentile
from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options

B7_ROWS = 10_000_000
MONTHS = 24
RETENTION = "180d"
RETENTION_DELTA = timedelta(days=180)
WRITERS = 2
WRITER_THINK_SECONDS = 0.005
BEFORE_SECONDS = 2.0
# The seed's "now": fixed, so that every variant (and every run) cuts at the same instant. The
# cutoff falls in the middle of its month: the boundary partition holds half a month of
# garbage, what a first run meets on average (--now moves it).
NOW = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)
SWEEP = {"table": "public.events", "reason": "expired", "age": "created_at", "retention": RETENTION}


def month_start(year: int, month: int) -> datetime:
    return datetime(year + (month - 1) // 12, (month - 1) % 12 + 1, 1, tzinfo=UTC)


def partition_bounds(now: datetime) -> list[tuple[datetime, datetime]]:
    """The 24 months up to and including ``now``'s, as [start, end)."""
    first = now.month - (MONTHS - 1)
    return [
        (month_start(now.year, first + i), month_start(now.year, first + i + 1))
        for i in range(MONTHS)
    ]


def seed(rows: int, now: datetime = NOW) -> Callable[[psycopg.Connection[Any]], None]:
    """Fill: ``events`` with ``rows`` rows spread evenly from the first month's start to
    ``now``."""

    def fill(conn: psycopg.Connection[Any]) -> None:
        conn.execute(
            "CREATE TABLE events (id bigint NOT NULL, created_at timestamptz NOT NULL, "
            "kind text NOT NULL, payload text NOT NULL) PARTITION BY RANGE (created_at)"
        )
        for start, end in partition_bounds(now):
            conn.execute(
                f"CREATE TABLE events_{start:%Y_%m} PARTITION OF events "
                f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
            )
        first = partition_bounds(now)[0][0]
        conn.execute(
            "INSERT INTO events (id, created_at, kind, payload) "
            "SELECT i, %(first)s + (%(now)s - %(first)s) * (i::float8 / %(rows)s), "
            "'seed', md5(i::text) FROM generate_series(1, %(rows)s) AS i",
            {"first": first, "now": now, "rows": rows},
        )
        conn.execute("CREATE INDEX ON events (created_at)")

    return fill


def fingerprint(conn: psycopg.Connection[Any], cutoff: datetime) -> tuple[int, str, int]:
    """``(rows kept, hash of them, rows past the cutoff)`` over the seeded rows."""
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE created_at >= %(c)s), "
        "coalesce(sum(hashtextextended(id::text || created_at::text || payload, 0)) "
        "         FILTER (WHERE created_at >= %(c)s), 0)::text, "
        "count(*) FILTER (WHERE created_at < %(c)s) FROM events WHERE kind = 'seed'",
        {"c": cutoff},
    ).fetchone()
    assert row is not None
    return int(row[0]), str(row[1]), int(row[2])


def dead_tuples(conn: psycopg.Connection[Any]) -> int:
    time.sleep(1.5)  # statistics reach pg_stat_user_tables within a second of a commit
    row = conn.execute(
        "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE relname LIKE 'events%%'"
    ).fetchone()
    return int(row[0]) if row else 0


class Writers:
    """Threads inserting one row at a time into the newest partition (at the pinned NOW);
    latencies by phase."""

    def __init__(self, dsn: str, now: datetime) -> None:
        self.dsn = dsn
        self.now = now
        self.phase = "before"
        self.latencies: dict[str, list[float]] = {"before": [], "during": []}
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(WRITERS)]

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                t0 = time.perf_counter()
                try:
                    conn.execute(
                        "INSERT INTO events VALUES (0, %(at)s, 'writer', 'w')", {"at": self.now}
                    )
                except psycopg.Error as exc:
                    self.errors.append(str(exc).splitlines()[0])
                self.latencies[self.phase].append(time.perf_counter() - t0)
                time.sleep(WRITER_THINK_SECONDS)

    def __enter__(self) -> Writers:
        for t in self.threads:
            t.start()
        time.sleep(BEFORE_SECONDS)
        self.phase = "during"
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def plain_delete(dsn: str, now: datetime) -> Run:
    with connect(dsn) as conn:
        t0 = time.perf_counter()
        cur = conn.execute(
            "DELETE FROM events WHERE created_at < %(cutoff)s", {"cutoff": now - RETENTION_DELTA}
        )
        return Run("a. one plain DELETE", max(cur.rowcount, 0), time.perf_counter() - t0)


def reaper_sweep(dsn: str, now: datetime, action: str, label: str) -> Run:
    spec = {"dsn": dsn, "partition_action": action, "now": now.isoformat()}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.b7", "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"bench.b7 child failed: {proc.stderr.strip()[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if out["outcome"] != "success":
        raise RuntimeError(f"reaper sweep failed: {out['error']}")
    run = Run(label, out["rows"], out["wall"], out["batch_seconds"], strategy=out["strategy"])
    run.extra["partitions"] = len(out["partitions"])
    return run


def child(spec: dict[str, Any]) -> int:
    """The sweep, in its own process: one JSON line with the result and the wall time."""
    from reaper import log
    from reaper.config.load import load_config
    from reaper.db import Database
    from reaper.engine.run import run_sweep

    log.configure("warning", json=True)
    config = load_config(
        {"dsn": spec["dsn"], "partition_action": spec["partition_action"]},
        {"sweeps": {"events": SWEEP}},
    )
    settings = config.settings
    sweep = next(s for s in config.sweeps if s.name == "events")
    with Database(connection_settings(settings), max_connections=1) as db:
        with db.session() as session:
            session.now()
        t0 = time.perf_counter()
        result = run_sweep(
            db, sweep, engine_options(settings), now=datetime.fromisoformat(spec["now"])
        )
        wall = time.perf_counter() - t0
    out = result.as_dict()
    out.update(wall=wall, batch_seconds=result.batch_seconds)
    print(json.dumps(out))
    return 0


def run(
    server: Server, rows: int = B7_ROWS, say: Callable[[str], None] = print, now: datetime = NOW
) -> str:
    """B7 on ``server``: seed once, run the three variants on copies; Markdown."""
    t0 = time.perf_counter()
    cutoff = now - RETENTION_DELTA
    template = server.seed(f"b7_{rows}_{now:%Y%m%d}", seed(rows, now))
    say(f"  seeded {rows:,} rows in 24 monthly partitions in {time.perf_counter() - t0:.0f} s")
    with psycopg.connect(server.dsn_of(template)) as conn:
        before = fingerprint(conn, cutoff)
    steps: list[tuple[str, Callable[[str], Run]]] = [
        ("a", lambda dsn: plain_delete(dsn, now)),
        (
            "b",
            lambda dsn: reaper_sweep(dsn, now, "off", "b. reaper row sweep (partition_action=off)"),
        ),
        (
            "c",
            lambda dsn: reaper_sweep(dsn, now, "drop", "c. reaper sweep (partition_action=drop)"),
        ),
    ]
    results: list[tuple[Run, Writers, int, tuple[int, str, int], int]] = []
    for _, step in steps:
        with server.clone(template) as dsn:
            with Writers(dsn, now) as writers:
                wal0, _ = wal_and_checkpoints(dsn)
                res = step(dsn)
                wal1, _ = wal_and_checkpoints(dsn)
            res.wal_bytes = wal1 - wal0
            with psycopg.connect(dsn, autocommit=True) as conn:
                after = fingerprint(conn, cutoff)
                dead = dead_tuples(conn)
        say(f"  {res.variant}: {res.rows:,} rows in {res.seconds:.2f} s")
        results.append((res, writers, dead, after, len(writers.errors)))
    server.release(template)
    return table(results, before, rows, cutoff)


def table(
    results: list[tuple[Run, Writers, int, tuple[int, str, int], int]],
    before: tuple[int, str, int],
    rows: int,
    cutoff: datetime,
) -> str:
    lines = []
    for res, writers, dead, after, errors in results:
        b, d = writers.latencies["before"], writers.latencies["during"]
        lines.append(
            [
                res.variant,
                f"{res.rows:,}",
                f"{res.seconds:.2f}",
                f"{(res.wal_bytes or 0) / 2**20:,.1f}",
                f"{dead:,}",
                f"{percentile(b, 0.5) * 1000:.1f} / {percentile(b, 0.99) * 1000:.1f}",
                f"{percentile(d, 0.5) * 1000:.1f} / {percentile(d, 0.99) * 1000:.1f}",
                str(res.extra.get("partitions", "-")),
                "yes"
                if after[:2] == before[:2] and after[2] == 0
                else f"NO ({after[0]:,} kept, {after[2]:,} past the cutoff)",
                str(errors),
            ]
        )
    out = [
        f"## B7 partition retention: {rows:,} rows in 24 monthly partitions, retention 180 days\n",
        report.table(
            [
                "variant",
                "rows deleted",
                "wall s",
                "WAL MiB",
                "dead tuples left",
                "writers p50/p99 ms before",
                "writers p50/p99 ms during",
                "partitions dropped",
                "rows >= cutoff exactly as before, none older",
                "writer errors",
            ],
            lines,
        ),
    ]
    by = {r.variant[0]: r for r, *_ in results}
    if "b" in by and "c" in by:
        b, c = by["b"], by["c"]
        out.append(
            f"\nTargets: (b)/(c) wall = {b.seconds / c.seconds:.1f}x (target >= 20x); "
            f"(c)/(b) WAL = {100 * (c.wal_bytes or 0) / max(b.wal_bytes or 1, 1):.2f}% "
            f"(target <= 1%). WAL includes the writers' inserts. {before[0]:,} seeded rows "
            f"are at or after the cutoff ({cutoff:%Y-%m-%d %H:%M} UTC)."
        )
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.b7", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=B7_ROWS, help="rows to seed (default 10,000,000)")
    p.add_argument(
        "--dsn",
        default=None,
        help="server DSN (default: REAPER_BENCH_DSN, REAPER_TEST_DSN, else an embedded PostgreSQL)",
    )
    p.add_argument(
        "--now",
        default=NOW.isoformat(),
        type=datetime.fromisoformat,
        help=f"the pinned clock (default {NOW.isoformat()}; the cutoff is 180 days earlier)",
    )
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(json.loads(args.child))
    from reaper.dev import devserver

    if args.dsn:
        os.environ["REAPER_BENCH_DSN"] = args.dsn
    env = "REAPER_BENCH_DSN" if os.environ.get("REAPER_BENCH_DSN") else "REAPER_TEST_DSN"
    with devserver.server(env) as dsn:
        server = Server(dsn)
        try:
            print(
                run(
                    server,
                    args.rows,
                    say=lambda t: print(t, file=sys.stderr, flush=True),
                    now=args.now,
                ),
                flush=True,
            )
        finally:
            server.drop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

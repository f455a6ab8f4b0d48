"""B8: near-total deletes. ``bootstrap_tokens`` of 8,000,000 rows of which 98% are garbage
(expired past node_retention, no request references them), the 2% survivors spread through
the heap: one in a hundred rows not expired, one in a hundred expired but referenced by a
live request. On identical copies:

(a) reaper's token sweep, opted in past the full-table interlock (``max_eligible_fraction
    = 1``), default settings otherwise (a heap walk: the sample finds 98% garbage);
(b) one plain ``DELETE FROM bootstrap_tokens WHERE <the sweep's predicate>``;
(c) copy-and-swap, offline: under an ACCESS EXCLUSIVE lock, the survivors copied into a new
    table, its indexes built, the requests' foreign key moved to it, the old table dropped
    and the new one renamed (what pg_repack does online, without its trigger and its log);
(d) reaper's token sweep as (a), on the index path (``strategy = index``): its batches
    through expires_at, each from where the last one ended (the keyset).

Each is measured for wall time, WAL written, the table's size after (heap and indexes),
then a ``VACUUM`` of it (time and WAL). Every variant must leave exactly the survivors
(count and a hash of every column).

``make bench`` runs it (a, b and c at 8,000,000 rows; ``--b8-rows`` for a quicker run, and
``--b8-variants abcd`` for the index path too), or
``python -m bench.b8 --rows 1000000``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from bench import report
from bench.pg import Server, compose, connect, wal_and_checkpoints
from bench.variants import Run, cutoffs, percentile, reaper_sweep, sweep_named

B8_ROWS = 8_000_000
# Each variant runs this many interleaved rounds (a, b, c, a, b, c, ...); medians are shown.
B8_ROUNDS = 1
# The default run's variants: the index path (d) is the slowest, and on request.
B8_VARIANTS = "abc"
TOKENS = "bootstrap_tokens"

# Token i is a survivor when i % 100 is 0 (not expired) or 50 (expired, but a live request
# references it); every other token expired 40 to 51 days ago, in an order that is not the
# heap's (expires_at is a hash of i), so that the expires_at index and the heap disagree as
# they do in a table filled over years.
SEED_TOKENS = """
INSERT INTO bootstrap_tokens (token_hash, description, created_at, expires_at)
SELECT 'b8-' || i, 'seeded token ' || i,
       now() - interval '400 days',
       CASE WHEN i %% 100 = 0 THEN now() + interval '30 days'
            ELSE now() - interval '40 days'
                 - ((i::bigint * 7919) %% 1000003) * interval '1 second' END
FROM generate_series(1, %(rows)s) AS s (i)
"""
SEED_REQUESTS = """
INSERT INTO enrollment_requests (token_id, peer_id, status, created_at)
SELECT t.id, 'peer-' || t.id, 'pending', now() - interval '1 day'
FROM bootstrap_tokens AS t WHERE t.id % 100 = 50
"""
FINGERPRINT = """
SELECT count(*), coalesce(sum(hashtextextended(
    id::text || token_hash || coalesce(description, '') || created_at::text
    || expires_at::text, 0)), 0)::text
FROM bootstrap_tokens
"""
TABLE_SIZE = """
SELECT pg_relation_size('public.bootstrap_tokens'),
       pg_indexes_size('public.bootstrap_tokens')
"""
# (c): the survivors copied under an ACCESS EXCLUSIVE lock, in one transaction. The foreign
# key of enrollment_requests is moved to the new table (validated: a scan of the requests).
COPY_AND_SWAP = [
    "LOCK TABLE public.bootstrap_tokens, public.enrollment_requests IN ACCESS EXCLUSIVE MODE",
    "CREATE TABLE public.bootstrap_tokens_new "
    "(LIKE public.bootstrap_tokens INCLUDING DEFAULTS INCLUDING IDENTITY "
    "INCLUDING CONSTRAINTS INCLUDING STORAGE)",
    "INSERT INTO public.bootstrap_tokens_new OVERRIDING SYSTEM VALUE "
    "SELECT * FROM public.bootstrap_tokens AS bootstrap_tokens WHERE NOT ({predicate})",
    "ALTER TABLE public.bootstrap_tokens_new ADD PRIMARY KEY (id), ADD UNIQUE (token_hash)",
    "CREATE INDEX ON public.bootstrap_tokens_new (expires_at)",
    "CREATE INDEX ON public.bootstrap_tokens_new (id) WHERE ephemeral",
    "SELECT setval(pg_get_serial_sequence('public.bootstrap_tokens_new', 'id'), "
    "(SELECT last_value FROM public.bootstrap_tokens_id_seq))",
    "ALTER TABLE public.enrollment_requests DROP CONSTRAINT enrollment_requests_token_id_fkey",
    "DROP TABLE public.bootstrap_tokens",
    "ALTER TABLE public.bootstrap_tokens_new RENAME TO bootstrap_tokens",
    "ALTER TABLE public.enrollment_requests ADD CONSTRAINT enrollment_requests_token_id_fkey "
    "FOREIGN KEY (token_id) REFERENCES public.bootstrap_tokens (id)",
]


def seed(rows: int) -> Callable[[psycopg.Connection[Any]], None]:
    def fill(conn: psycopg.Connection[Any]) -> None:
        conn.execute(SEED_TOKENS, {"rows": rows})
        conn.execute(SEED_REQUESTS)

    return fill


@dataclass
class After:
    """What a variant left: the survivors' fingerprint, the table's size, its VACUUM."""

    fingerprint: tuple[int, str]
    heap_bytes: int
    index_bytes: int
    vacuum_seconds: float
    vacuum_wal_bytes: int | None
    heap_bytes_vacuumed: int


def fingerprint(conn: psycopg.Connection[Any]) -> tuple[int, str]:
    row = conn.execute(FINGERPRINT).fetchone()
    assert row is not None
    return int(row[0]), str(row[1])


class DatabaseWal:
    """The WAL of one database's relations between two points, from the records themselves
    (pg_walinspect): the server's WAL position also counts what other databases of a shared
    server write meanwhile. No replication slot keeps the records: on a shared server one
    would keep every database's WAL until the variant ends (a full disk stopped the server
    once). No connection stays open meanwhile either: reaper's pacer counts a session of the
    database that was active within its busy window as live traffic, and shortens its first
    batches. ``bytes`` is None where the extension is missing or a checkpoint has already
    recycled the variant's first records."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.bytes: int | None = None
        self.start: str | None = None
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
                row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
                self.start = row[0] if row else None
        except psycopg.Error:
            pass

    def stop(self) -> None:
        if self.start is None:
            return
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT coalesce(sum(record_length), 0) FROM pg_get_wal_records_info("
                    "%(start)s::pg_lsn, pg_current_wal_flush_lsn()) "
                    "WHERE block_ref ~ ('rel [0-9]+/' || (SELECT oid FROM pg_database "
                    "WHERE datname = current_database()) || '/')",
                    {"start": self.start},
                ).fetchone()
                self.bytes = int(row[0]) if row else None
        except psycopg.Error:
            self.bytes = None


def measure_after(dsn: str) -> After:
    with psycopg.connect(dsn, autocommit=True) as conn:
        fp = fingerprint(conn)
        heap, index = conn.execute(TABLE_SIZE).fetchone() or (0, 0)
        own = DatabaseWal(dsn)
        t0 = time.perf_counter()
        conn.execute("VACUUM public.bootstrap_tokens")
        seconds = time.perf_counter() - t0
        own.stop()
        heap_v, _ = conn.execute(TABLE_SIZE).fetchone() or (0, 0)
    return After(fp, int(heap), int(index), seconds, own.bytes, int(heap_v))


def plain_delete(dsn: str) -> Run:
    sweep = sweep_named(TOKENS)
    with connect(dsn) as conn:
        params = cutoffs(conn, sweep)
        stmt = compose("plain_delete", sweep.table, sweep.predicate.where)
        t0 = time.perf_counter()
        cur = conn.execute(stmt, params)
        return Run("b. one plain DELETE", max(cur.rowcount, 0), time.perf_counter() - t0)


def copy_and_swap(dsn: str) -> Run:
    sweep = sweep_named(TOKENS)
    with connect(dsn) as conn:
        params = cutoffs(conn, sweep)
        before = conn.execute("SELECT count(*) FROM public.bootstrap_tokens").fetchone()
        t0 = time.perf_counter()
        with conn.transaction():
            for stmt in COPY_AND_SWAP:
                composed = psycopg.sql.SQL(stmt).format(predicate=sweep.predicate.where)
                conn.execute(composed, params if "{predicate}" in stmt else None)
        seconds = time.perf_counter() - t0
        after = conn.execute("SELECT count(*) FROM public.bootstrap_tokens").fetchone()
    rows = int(before[0]) - int(after[0]) if before and after else 0
    return Run("c. copy-and-swap (offline)", rows, seconds)


def sweep(dsn: str) -> Run:
    return reaper_sweep(
        dsn,
        TOKENS,
        settings={"max_eligible_fraction": 1.0},
        label="a. reaper token sweep (opted in)",
    )


def index_sweep(dsn: str) -> Run:
    return reaper_sweep(
        dsn,
        TOKENS,
        settings={"max_eligible_fraction": 1.0, "strategy": "index"},
        label="d. reaper token sweep (opted in), index path",
    )


def drains(run: Run) -> str:
    """The median batch of the run's first tenth and of its last tenth, in ms: a sweep that
    slows as the table drains has a larger second."""
    times = run.batch_seconds
    if len(times) < 20:
        return "-"
    tenth = len(times) // 10
    return (
        f"{percentile(times[:tenth], 0.5) * 1000:.0f} / "
        f"{percentile(times[-tenth:], 0.5) * 1000:.0f}"
    )


def run(
    server: Server,
    rows: int = B8_ROWS,
    rounds: int = B8_ROUNDS,
    say: Callable[[str], None] = print,
    variants: str = B8_VARIANTS,
) -> str:
    """B8 on ``server``: seed once, run the variants on copies, ``rounds`` times interleaved;
    Markdown."""
    t0 = time.perf_counter()
    template = server.seed(f"b8_{rows}", seed(rows))
    say(f"  seeded {rows:,} tokens in {time.perf_counter() - t0:.0f} s")
    with psycopg.connect(server.dsn_of(template)) as conn:
        conn.execute("SET statement_timeout = 0")
        stmt = psycopg.sql.SQL(
            FINGERPRINT.replace("FROM bootstrap_tokens", "FROM bootstrap_tokens WHERE NOT ({})")
        ).format(sweep_named(TOKENS).predicate.where)
        params = cutoffs(conn, sweep_named(TOKENS))
        row = conn.execute(stmt, params).fetchone()
        assert row is not None
        survivors = (int(row[0]), str(row[1]))
        size = conn.execute(TABLE_SIZE).fetchone() or (0, 0)
    steps: dict[str, Callable[[str], Run]] = {
        "a": sweep,
        "b": plain_delete,
        "c": copy_and_swap,
        "d": index_sweep,
    }
    results: dict[str, list[tuple[Run, After, float]]] = {k: [] for k in variants}
    for n in range(rounds):
        for key in variants:
            with server.clone(template) as dsn:
                load = os.getloadavg()[0]
                wal0, ckpt0 = wal_and_checkpoints(dsn)
                own = DatabaseWal(dsn)
                res = steps[key](dsn)
                own.stop()
                wal1, ckpt1 = wal_and_checkpoints(dsn)
                res.wal_bytes, res.checkpoints = own.bytes, ckpt1 - ckpt0
                res.extra["server_wal_bytes"] = wal1 - wal0
                after = measure_after(dsn)
            say(
                f"  {res.variant}: {res.rows:,} rows in {res.seconds:.2f} s "
                f"(round {n + 1} of {rounds}, load {load:.2f}); WAL "
                f"{'-' if res.wal_bytes is None else f'{res.wal_bytes / 2**20:,.0f}'} MiB, "
                f"heap {after.heap_bytes / 2**20:,.0f} MiB, VACUUM {after.vacuum_seconds:.2f} s, "
                f"batch ms first/last tenth {drains(res)}"
            )
            results[key].append((res, after, load))
    server.release(template)
    return table(results, survivors, rows, size)


def table(
    results: dict[str, list[tuple[Run, After, float]]],
    survivors: tuple[int, str],
    rows: int,
    size: tuple[int, int],
) -> str:
    mib = 2**20
    lines = []
    medians: dict[str, Run] = {}
    for key, runs in results.items():
        res, after, _ = sorted(runs, key=lambda r: r[0].seconds)[len(runs) // 2]
        medians[key] = res
        each = " / ".join(f"{r.seconds:.1f}" for r, _, _ in runs)
        loads = " / ".join(f"{ld:.1f}" for _, _, ld in runs)
        lines.append(
            [
                res.variant,
                f"{res.rows:,}",
                f"{res.seconds:.2f}",
                each,
                loads,
                "-" if res.wal_bytes is None else f"{res.wal_bytes / mib:,.0f}",
                f"{res.extra['server_wal_bytes'] / mib:,.0f}",
                f"{after.heap_bytes / mib:,.0f} / {after.index_bytes / mib:,.0f}",
                f"{after.vacuum_seconds:.2f}",
                "-" if after.vacuum_wal_bytes is None else f"{after.vacuum_wal_bytes / mib:,.0f}",
                f"{after.heap_bytes_vacuumed / mib:,.0f}",
                f"{res.extra.get('strategy') or res.strategy or '-'}",
                f"{len(res.batch_seconds):,}" if res.strategy else "-",
                drains(res),
                "yes"
                if after.fingerprint == survivors
                else f"NO ({after.fingerprint[0]:,} rows left)",
            ]
        )
    out = [
        f"## B8 near-total deletes: {rows:,} tokens, {rows - survivors[0]:,} garbage "
        f"({(rows - survivors[0]) / rows:.0%}), table {size[0] / mib:,.0f} MiB + indexes "
        f"{size[1] / mib:,.0f} MiB\n",
        report.table(
            [
                "variant",
                "rows deleted",
                "wall s (median)",
                "wall s each round",
                "load average (1 min) each round",
                "WAL MiB (this database)",
                "WAL MiB (whole server)",
                "heap / indexes MiB after",
                "VACUUM after s",
                "VACUUM WAL MiB",
                "heap MiB after VACUUM",
                "strategy",
                "batches",
                "median batch ms, first / last tenth",
                "survivors exactly kept",
            ],
            lines,
        ),
    ]
    if "a" in medians and "b" in medians:
        a, b = medians["a"], medians["b"]
        out.append(f"\nTarget: (a)/(b) = {a.seconds / b.seconds:.2f}x (target <= 1.25x).")
    if "c" in medians and "b" in medians:
        out.append(f"(b)/(c) = {medians['b'].seconds / medians['c'].seconds:.1f}x.")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.b8", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=B8_ROWS, help="tokens to seed (default 8,000,000)")
    p.add_argument(
        "--rounds",
        type=int,
        default=B8_ROUNDS,
        help="interleaved rounds of the variants (default 1)",
    )
    p.add_argument(
        "--variants", default=B8_VARIANTS, help=f"which variants, e.g. abcd (default {B8_VARIANTS})"
    )
    p.add_argument(
        "--reuse",
        action="store_true",
        help="keep the seeded template database (reaper_bench_*) and reuse it",
    )
    p.add_argument(
        "--dsn",
        default=None,
        help="server DSN (default: REAPER_BENCH_DSN, REAPER_TEST_DSN, else an embedded PostgreSQL)",
    )
    args = p.parse_args(argv)
    from reaper.dev import devserver

    if args.dsn:
        os.environ["REAPER_BENCH_DSN"] = args.dsn
    env = "REAPER_BENCH_DSN" if os.environ.get("REAPER_BENCH_DSN") else "REAPER_TEST_DSN"
    with devserver.server(env) as dsn:
        server = Server(dsn, reuse=args.reuse)
        try:
            print(
                run(
                    server,
                    args.rows,
                    args.rounds,
                    say=lambda t: print(t, file=sys.stderr, flush=True),
                    variants=args.variants,
                ),
                flush=True,
            )
        finally:
            server.drop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

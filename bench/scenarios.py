"""The benchmark's scenarios (B1-B6), and the measurements behind reaper's defaults.

Each scenario seeds its rows once into a template database and runs every variant on a fresh
copy, in the same run, so that ratios hold on a noisy machine. Each returns Markdown.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench import report
from bench.pg import Server, bench_sql, compose, connect, wal_and_checkpoints
from bench.variants import (
    Run,
    cutoffs,
    limit_loop,
    percentile,
    plain_delete,
    reaper_sweep,
    split_delete,
    sweep_named,
    unlocked_walk,
)
from reaper import sqltext
from reaper.config.connection import connection_settings
from reaper.config.settings import DEFAULT_BACKLOG_LIMIT, DEFAULT_PARALLEL
from reaper.db import SweepStatements

REQUESTS = "enrollment_requests"
EPHEMERAL_REQUESTS = "enrollment_requests_ephemeral"


def seed_requests(rows: int, num: int, den: int) -> Callable[[psycopg.Connection[Any]], None]:
    """Fill: tokens, then ``rows`` requests of which ``num`` in ``den`` are garbage."""

    def fill(conn: psycopg.Connection[Any]) -> None:
        conn.execute(bench_sql("seed_tokens"))  # type: ignore[call-overload,unused-ignore]
        conn.execute(bench_sql("seed_requests"), {"rows": rows, "num": num, "den": den})  # type: ignore[call-overload,unused-ignore]

    return fill


def seed_nodes(rows: int) -> Callable[[psycopg.Connection[Any]], None]:
    def fill(conn: psycopg.Connection[Any]) -> None:
        conn.execute(bench_sql("seed_nodes"), {"rows": rows})  # type: ignore[call-overload,unused-ignore]

    return fill


def measured(step: Callable[[str], Run], dsn: str) -> Run:
    """``step(dsn)`` with the WAL it wrote and the checkpoints during it."""
    wal0, ckpt0 = wal_and_checkpoints(dsn)
    run = step(dsn)
    wal1, ckpt1 = wal_and_checkpoints(dsn)
    run.wal_bytes, run.checkpoints = wal1 - wal0, ckpt1 - ckpt0
    return run


def archived_sweep(dsn: str) -> Run:
    """(e) reaper's sweep with an archive table: the requests it deletes are inserted into
    ``public.enrollment_requests_archive`` (LIKE the table, plus archived_at) by each batch's
    own statement. The empty archive is created first (milliseconds)."""
    with connect(dsn) as conn:
        conn.execute(
            "CREATE TABLE public.enrollment_requests_archive (LIKE public.enrollment_requests, "
            "archived_at timestamptz NOT NULL DEFAULT now())"
        )
    return reaper_sweep(
        dsn,
        REQUESTS,
        label="e. reaper + archive table",
        file_values={"sweeps": {REQUESTS: {"archive": "public.enrollment_requests_archive"}}},
    )


def keys_sweep(dsn: str) -> Run:
    """(f) reaper's sweep at log level debug: each batch returns its deleted rows' keys and
    logs them in one batch_keys line."""
    return reaper_sweep(dsn, REQUESTS, label="f. reaper, keys logged (debug)", log_level="debug")


def parallel_sweep(parallel: int) -> Callable[[str], Run]:
    """(g, h) reaper's sweep at ``--parallel N``: the heap walk's ranges on up to N
    connections while nothing else runs (docs/performance.md, "Parallel heap ranges")."""
    label = PARALLEL_LABELS[parallel]
    return lambda dsn: reaper_sweep(dsn, REQUESTS, {"parallel": str(parallel)}, label=label)


# B1's variants of reaper's sweep at --parallel 1, 2 and 3 other than the default's, (c).
PARALLEL_LABELS = {
    n: f"{letter}. reaper, --parallel {n}"
    for letter, n in zip("gh", [n for n in (1, 2, 3) if n != DEFAULT_PARALLEL], strict=False)
}


def backlog(
    server: Server,
    rows: int,
    *,
    with_loop: bool = True,
    loop_max_seconds: float | None = None,
    with_unlocked: bool = True,
    with_trail: bool = False,
    with_parallel: bool = False,
    repeat: int = 1,
    say: Callable[[str], None] = print,
) -> tuple[list[Run], float]:
    """B1/B2: ``rows`` requests, two thirds garbage interleaved. Returns the runs and the
    seconds the seeding took. ``with_trail``: also (e) reaper with an archive table and (f)
    reaper logging each batch's keys. ``with_parallel``: also (g) and (h), reaper's sweep at
    the two of ``--parallel`` 1, 2 and 3 that are not the default ((c)), and (i), two plain
    DELETEs at once over the two halves of the heap (the ceiling of two connections).

    ``repeat``: the variants run that many rounds, interleaved (a, b, c, d, a, b, ...), each
    on a fresh clone; each variant's run of median wall time is returned, with every round's
    seconds in ``extra["rounds"]``. A single plain DELETE varied by a third between runs on a
    shared machine (0.88-1.51 s), and every ratio divides by it."""
    t0 = time.perf_counter()
    template = server.seed(f"requests_{rows}", seed_requests(rows, 2, 3))
    seeded = time.perf_counter() - t0
    say(f"  seeded {rows:,} requests in {seeded:.0f} s")
    runs: list[Run] = []
    steps: list[Callable[[str], Run]] = [lambda dsn: plain_delete(dsn, REQUESTS)]
    if with_loop:
        steps.append(lambda dsn: limit_loop(dsn, REQUESTS, "id", loop_max_seconds))
    steps.append(lambda dsn: reaper_sweep(dsn, REQUESTS))
    if with_unlocked:
        steps.append(lambda dsn: unlocked_walk(dsn, REQUESTS, 256))
    if with_trail:
        steps += [archived_sweep, keys_sweep]
    if with_parallel:
        steps += [parallel_sweep(n) for n in PARALLEL_LABELS]
        steps.append(lambda dsn: split_delete(dsn, REQUESTS, 2))
    rounds: list[list[Run]] = [[] for _ in steps]
    for n in range(repeat):
        for i, step in enumerate(steps):
            with server.clone(template) as dsn:
                run = measured(step, dsn)
            label = f" (round {n + 1} of {repeat})" if repeat > 1 else ""
            say(f"  {run.variant}: {run.rows:,} rows in {run.seconds:.2f} s{label}")
            rounds[i].append(run)
    for variant_runs in rounds:
        median = sorted(variant_runs, key=lambda r: r.seconds)[len(variant_runs) // 2]
        median.extra["rounds"] = [r.seconds for r in variant_runs]
        runs.append(median)
    server.release(template)
    return runs, seeded


def steady_state(
    server: Server,
    rows: int,
    eligible_every: int,
    say: Callable[[str], None] = print,
    run_variants: bool = True,
) -> tuple[list[Run], str, str]:
    """B3: ``rows`` requests, one in ``eligible_every`` garbage, scattered. Keeps its
    template (B5 reads it); returns the runs, the template's name and the index batch's plan."""
    template = server.seed(f"steady_{rows}", seed_requests(rows, 1, eligible_every))
    say(f"  seeded {rows:,} requests")
    runs = []
    steps: list[Callable[[str], Run]] = [
        lambda dsn: plain_delete(dsn, REQUESTS),
        lambda dsn: limit_loop(dsn, REQUESTS, "id"),
        lambda dsn: reaper_sweep(dsn, REQUESTS),
    ]
    for step in steps if run_variants else []:
        with server.clone(template) as dsn:
            run = measured(step, dsn)
        say(f"  {run.variant}: {run.rows:,} rows in {run.seconds:.2f} s")
        runs.append(run)
    sweep = sweep_named(REQUESTS)
    with connect(server.dsn_of(template)) as conn:
        stmts = SweepStatements(sweep.predicate)
    with connect(server.dsn_of(template)) as conn, conn.transaction():
        # As reaper's index batch runs: after index_batch_settings.sql, in one transaction.
        conn.execute(psycopg.sql.SQL(sqltext.engine("index_batch_settings")))  # type: ignore[arg-type,unused-ignore]
        params = dict(cutoffs(conn, sweep), batch_size=5000)
        plan = "\n".join(
            str(r[0])
            for r in conn.execute(
                psycopg.sql.SQL("EXPLAIN {}").format(stmts.index_plan), params
            ).fetchall()
        )
    return runs, template, plan


@dataclass
class Traffic:
    """Refresh latencies of the clients, by phase, and who was refreshed."""

    latencies: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    refreshed: set[str] = field(default_factory=set)
    phase: str = "before"
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, seconds: float, peer: str, updated: bool) -> None:
        with self.lock:
            self.latencies.setdefault((kind, self.phase), []).append(seconds)
            if updated:
                self.refreshed.add(peer)


LIVE_CLIENTS = 4
EDGE_CLIENTS = 2
# Each client waits this long between refreshes (a heartbeat stream, not a stress test):
# 4 clients x ~150 refreshes/s.
THINK_SECONDS = 0.005
BEFORE_SECONDS = 3.0


def _client(
    dsn: str,
    kind: str,
    peers: Callable[[random.Random], str],
    traffic: Traffic,
    go: threading.Event,
    stop: threading.Event,
    seed: int,
) -> None:
    rng = random.Random(seed)
    stmt = compose("refresh_node", "nodes")
    with psycopg.connect(dsn, autocommit=True) as conn:
        go.wait()
        while not stop.is_set():
            peer = peers(rng)
            t0 = time.perf_counter()
            cur = conn.execute(stmt, {"peer_id": peer})
            traffic.record(kind, time.perf_counter() - t0, peer, cur.rowcount == 1)
            time.sleep(THINK_SECONDS)


PACED = "c. reaper sweep"
UNPACED = "c'. reaper sweep, unpaced (busy_share 1)"


def live_traffic(
    server: Server,
    rows: int,
    say: Callable[[str], None] = print,
    variants: list[tuple[str, dict[str, Any]]] | None = None,
    rounds: int = 1,
) -> list[tuple[Run, Traffic, int]]:
    """B4: while (a) and then (c) delete the nodes backlog, clients refresh members.

    ``variants``: (label, settings) of reaper's sweeps to run after (a) (default: reaper's
    defaults, then without pacing), ``rounds`` times in turn, so that the machine's load
    weighs on each variant alike."""
    template = server.seed(f"nodes_{rows}", seed_nodes(rows))
    say(f"  seeded {rows:,} nodes")
    out = []
    sweeps = (
        variants
        if variants is not None
        else [
            (PACED, {}),
            (UNPACED, {"busy_share": 1}),
        ]
    )
    steps: list[tuple[str, dict[str, Any]]] = [("a", {}), *(sweeps * rounds)]
    for variant, sweep_settings in steps:
        with server.clone(template) as dsn:
            traffic = Traffic()
            go_live, go_edge, stop = threading.Event(), threading.Event(), threading.Event()
            threads = [
                threading.Thread(
                    target=_client,
                    args=(
                        dsn,
                        "live",
                        lambda r: f"node-{2 * r.randrange(rows // 2) + 1}",
                        traffic,
                        go_live,
                        stop,
                        i,
                    ),
                )
                for i in range(LIVE_CLIENTS)
            ] + [
                threading.Thread(
                    target=_client,
                    args=(
                        dsn,
                        "edge",
                        lambda r: f"node-{100 * r.randrange(1, rows // 100 + 1)}",
                        traffic,
                        go_edge,
                        stop,
                        100 + i,
                    ),
                )
                for i in range(EDGE_CLIENTS)
            ]
            for t in threads:
                t.start()
            go_live.set()
            time.sleep(BEFORE_SECONDS)

            def during(traffic: Traffic = traffic, go_edge: threading.Event = go_edge) -> None:
                traffic.phase = "during"
                go_edge.set()

            try:
                if variant == "a":
                    during()
                    run = plain_delete(dsn, "nodes_silent")
                else:
                    run = reaper_sweep(
                        dsn, "nodes_silent", sweep_settings, label=variant, on_start=during
                    )
            finally:
                stop.set()
                go_edge.set()
                for t in threads:
                    t.join()
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM unnest(%s::text[]) AS r (peer) "
                    "WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.peer_id = r.peer)",
                    (sorted(traffic.refreshed),),
                ).fetchone()
                lost = int(row[0]) if row else -1
        say(
            f"  {run.variant}: {run.rows:,} rows in {run.seconds:.2f} s, "
            f"{len(traffic.refreshed):,} members refreshed, {lost} of them deleted"
        )
        out.append((run, traffic, lost))
    server.release(template)
    return out


@dataclass
class WalRun:
    """One sweep of the WAL brake's line: its run, the WAL the server wrote meanwhile
    (bytes) and the brake's limit (bytes a second; None: off)."""

    run: Run
    wal_bytes: int
    limit: int | None

    @property
    def rate(self) -> float:
        return self.wal_bytes / self.run.seconds if self.run.seconds > 0 else 0.0


def wal_brake(
    server: Server, rows: int, limit: int, rounds: int = 1, say: Callable[[str], None] = print
) -> list[WalRun]:
    """The WAL brake: reaper's sweep of the nodes backlog (no other client), with and without
    ``--max-wal-rate limit``, in turn ``rounds`` times; the server's WAL written over each
    sweep's wall time (the server's: other work on it counts too)."""
    template = server.seed(f"nodes_{rows}", seed_nodes(rows))
    out = []
    for _ in range(rounds):
        for rate in (None, limit):
            with server.clone(template) as dsn:
                wal0, _ = wal_and_checkpoints(dsn)
                run = reaper_sweep(
                    dsn,
                    "nodes_silent",
                    {"max_wal_rate": rate or 0},
                    label="reaper sweep" + (f", max_wal_rate {rate:,}" if rate else ", no brake"),
                )
                wal1, _ = wal_and_checkpoints(dsn)
            w = WalRun(run, wal1 - wal0, rate)
            say(
                f"  {run.variant}: {run.rows:,} rows in {run.seconds:.2f} s, "
                f"{w.wal_bytes / 1e6:.0f} MB of WAL, {w.rate / 1e6:.1f} MB/s"
            )
            out.append(w)
    server.release(template)
    return out


def gauges(server: Server, template: str, repeat: int = 20) -> list[tuple[str, list[float], Any]]:
    """B5: the cost of each gauge's query on ``template`` (ms samples and the last value)."""
    from reaper.config.sweeps import BUILTINS
    from reaper.engine.strategy import SAMPLE_BLOCKS

    sweep = sweep_named(REQUESTS)
    with connect(server.dsn_of(template)) as conn:
        stmts = SweepStatements(sweep.predicate)
    tables = sorted({s.table for s in BUILTINS})
    no_seqscan = psycopg.sql.SQL(sqltext.engine("index_batch_settings"))  # type: ignore[arg-type,unused-ignore]
    out = []
    with connect(server.dsn_of(template)) as conn:
        params = cutoffs(conn, sweep)
        row = conn.execute(
            "SELECT pg_relation_size(%s::regclass) / 8192, reltuples FROM pg_class "
            "WHERE oid = %s::regclass",
            (REQUESTS, REQUESTS),
        ).fetchone()
        assert row is not None
        blocks, reltuples = int(row[0]), float(row[1])
        percent = min(100.0, 100.0 * SAMPLE_BLOCKS / blocks)
        capped = stmts.backlog_rows
        # (label, statement, params, run with enable_seqscan off, value from the rows)
        queries: list[tuple[str, Any, Any, bool, Callable[[list[Any]], Any]]] = [
            (
                "reaper_storage_rows (storage_rows.sql, all swept tables)",
                psycopg.sql.SQL(sqltext.engine("storage_rows")),  # type: ignore[arg-type,unused-ignore]
                {"tables": tables},
                False,
                lambda rows: sum(int(r[1]) for r in rows),
            ),
            (
                "backlog: the planner's estimate (estimate_eligible.sql)",
                stmts.estimate_eligible,
                params,
                False,
                lambda rows: int(rows[0][0][0]["Plan"]["Plan Rows"]),
            ),
            (
                f"backlog: block sample, {SAMPLE_BLOCKS} blocks (sample_eligible.sql) x reltuples",
                stmts.sample_eligible,
                dict(params, percent=percent),
                False,
                lambda rows: round(rows[0][0] / max(rows[0][1], 1) * reltuples),
            ),
            (
                "backlog: block sample, 100 blocks x reltuples",
                stmts.sample_eligible,
                dict(params, percent=percent / 3),
                False,
                lambda rows: round(rows[0][0] / max(rows[0][1], 1) * reltuples),
            ),
            (
                f"reaper_backlog_rows without the index settings, limit {DEFAULT_BACKLOG_LIMIT:,}",
                capped,
                dict(params, limit=DEFAULT_BACKLOG_LIMIT),
                False,
                lambda rows: rows[0][0],
            ),
            (
                "reaper_backlog_rows (backlog_rows.sql as the daemon runs it), limit "
                f"{DEFAULT_BACKLOG_LIMIT:,} (the default --backlog-limit)",
                capped,
                dict(params, limit=DEFAULT_BACKLOG_LIMIT),
                True,
                lambda rows: rows[0][0],
            ),
            (
                "reaper_backlog_rows, limit 1,000",
                capped,
                dict(params, limit=1_000),
                True,
                lambda rows: rows[0][0],
            ),
            (
                "reaper_backlog_rows, limit 10,000",
                capped,
                dict(params, limit=10_000),
                True,
                lambda rows: rows[0][0],
            ),
            (
                "reaper_backlog_rows, limit 100,000 (the former default)",
                capped,
                dict(params, limit=100_000),
                True,
                lambda rows: rows[0][0],
            ),
            (
                "backlog: count, uncapped (count_eligible.sql, the dry run)",
                stmts.count_eligible,
                params,
                False,
                lambda rows: rows[0][0],
            ),
            (
                "COUNT(*) of the table",
                compose("count_table", REQUESTS),
                None,
                False,
                lambda rows: rows[0][0],
            ),
        ]
        # A query past GAUGE_TIMEOUT_MS is cut off and reported once, not repeated.
        conn.execute(f"SET statement_timeout = {GAUGE_TIMEOUT_MS}")
        for label, stmt, p, index_only, value_of in queries:
            samples: list[float] = []
            value = None
            for _ in range(repeat):
                t0 = time.perf_counter()
                try:
                    with conn.transaction():
                        if index_only:
                            conn.execute(no_seqscan)
                        # Never a prepared statement: its plan would outlive the settings.
                        rows = conn.execute(stmt, p, prepare=False).fetchall()
                except psycopg.errors.QueryCanceled:
                    samples.append((time.perf_counter() - t0) * 1000)
                    value = f"cut off after {GAUGE_TIMEOUT_MS / 1000:g} s"
                    break
                samples.append((time.perf_counter() - t0) * 1000)
                value = value_of(rows)
            out.append((label, samples, value))
    return out


# B5: a gauge query still running after this is cancelled and reported as cut off.
GAUGE_TIMEOUT_MS = 5000


def crossover(
    server: Server, rows: int, fractions: list[tuple[int, int]], say: Callable[[str], None] = print
) -> list[tuple[float, Run, Run]]:
    """Heap walk against index batches at several garbage fractions (the auto threshold)."""
    out = []
    for num, den in fractions:
        template = server.seed(f"x_{num}_{den}", seed_requests(rows, num, den))
        got = []
        for strategy in ("heap", "index"):
            with server.clone(template) as dsn:
                got.append(
                    reaper_sweep(
                        dsn, REQUESTS, {"strategy": strategy}, label=f"strategy {strategy}"
                    )
                )
        server.release(template)
        say(f"  {num}/{den}: heap {got[0].seconds:.2f} s, index {got[1].seconds:.2f} s")
        out.append((num / den, got[0], got[1]))
    return out


def tune(
    server: Server,
    template: str,
    settings_list: list[dict[str, Any]],
    say: Callable[[str], None] = print,
) -> list[tuple[dict[str, Any], Run]]:
    """reaper's sweep on copies of ``template`` at each of ``settings_list``."""
    out = []
    for settings in settings_list:
        with server.clone(template) as dsn:
            run = reaper_sweep(dsn, REQUESTS, settings, label=report.settings_label(settings))
        say(
            f"  {run.variant}: {run.seconds:.2f} s, {run.strategy}, "
            f"p99 {percentile(run.batch_seconds, 0.99) * 1000:.0f} ms"
        )
        out.append((settings, run))
    return out


# B6 pauses the standby's replay this long after reaper's sweep started.
PAUSE_AFTER_SECONDS = 0.5


@dataclass
class ReplicaLagRun:
    """B6's figures (times in seconds)."""

    run: Run
    max_lag: float
    paused_at: float
    resumed_at: float
    halted_after: float | None  # from the pause to the last batch before the halt
    batches_past_limit: int  # batches that ended after the lag passed max_lag, before resume
    rows_before_resume: int
    peak_lag: float
    samples: list[tuple[float, float]] = field(default_factory=list)


def replica_lag(
    rows: int, max_lag: float, hold_seconds: float, say: Callable[[str], None] = print
) -> ReplicaLagRun:
    """B6: a throwaway primary and streaming standby (bench.replica); ``rows`` bootstrap
    members of which half are garbage. The standby's replay is paused
    :data:`PAUSE_AFTER_SECONDS` after reaper's sweep starts, and resumed ``hold_seconds``
    after the sweep should have stopped (``max_lag`` after the pause). reaper's batch end
    times, its throttled seconds and the lag (measured apart every 50 ms, as reaper
    measures it) tell when it stopped and resumed."""
    from bench import replica
    from reaper.db import Standby
    from reaper.engine.pacing import WalHistory, standby_lag

    with replica.primary_and_standby() as pair:
        server = Server(pair.primary)
        template = server.seed(f"b6_nodes_{rows}", seed_nodes(rows))
        dsn = server.dsn_of(template)
        replica.wait_streaming(pair.primary)
        say(f"  seeded {rows:,} nodes on a primary with a streaming standby")
        history = WalHistory()
        samples: list[tuple[float, float]] = []
        done = threading.Event()
        marks: dict[str, float] = {}

        def monitor() -> None:
            with psycopg.connect(pair.primary, autocommit=True) as conn:
                while not done.is_set():
                    row = conn.execute(
                        "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, "
                        "(replay_lsn - '0/0'::pg_lsn)::bigint, "
                        "extract(epoch FROM replay_lag)::float8 FROM pg_stat_replication "
                        "WHERE application_name = %s",
                        (replica.STANDBY_NAME,),
                    ).fetchone()
                    now = time.monotonic()
                    if row is not None:
                        history.record(now, int(row[0]))
                        lag = standby_lag(Standby("s", True, row[1], row[2]), history, now)
                        samples.append((time.time(), lag or 0.0))
                    time.sleep(0.05)

        def controller() -> None:
            # Paused once batches run: WAL from before the sweep's first measurement is dated
            # at that measurement (a lower bound), which a daemon's earlier runs would cover.
            with psycopg.connect(pair.standby, autocommit=True) as standby:
                if done.wait(PAUSE_AFTER_SECONDS):
                    return
                marks["paused"] = time.time()
                standby.execute("SELECT pg_wal_replay_pause()")
                if not done.wait(max_lag + hold_seconds):
                    marks["resumed"] = time.time()
                    standby.execute("SELECT pg_wal_replay_resume()")

        watcher = threading.Thread(target=monitor)
        watcher.start()
        ctl = threading.Thread(target=controller)
        try:
            run = reaper_sweep(
                dsn,
                "nodes_silent",
                {"max_replica_lag": f"{max_lag}s"},
                label=f"c. reaper sweep, max_replica_lag {max_lag:g}s",
                on_start=ctl.start,
            )
        finally:
            done.set()
            if ctl.is_alive() or ctl.ident is not None:
                ctl.join()
            watcher.join()
        if "paused" not in marks:
            raise RuntimeError("B6: the sweep ended before the standby's replay was paused")
        paused = marks["paused"]
        resumed = marks.get("resumed", math.inf)
        ends = [float(t) for t, _ in run.extra["batch_ends"]]
        before = [t for t in ends if t < resumed]
        # The halt: the last batch before the longest gap between batches (the pause).
        halted_after = max(before) - paused if before and resumed < math.inf else None
        limit_at = paused + max_lag
        past = sum(1 for t in ends if limit_at < t < resumed)
        rows_before = max((int(n) for t, n in run.extra["batch_ends"] if t < resumed), default=0)
        return ReplicaLagRun(
            run,
            max_lag,
            paused,
            resumed,
            halted_after,
            past,
            rows_before,
            max((lag for _, lag in samples), default=0.0),
            samples,
        )


def daemon_gauges(
    server: Server, template: str, repeat: int = 20
) -> list[tuple[str, list[float], Any]]:
    """B5, as ``reaper run`` refreshes its gauges (reaper.daemon.gauges): every gauge's own call on
    a reaper Session, at the default settings, on ``template`` (ms samples and the last value)."""
    from reaper import errors
    from reaper.config.load import load_config
    from reaper.config.sweeps import BUILTINS
    from reaper.db import Database
    from reaper.engine.clock import compute_cutoffs
    from reaper.sqltext.names import TableName

    config = load_config({"dsn": server.dsn_of(template)})
    settings = config.settings
    tables = sorted({TableName.parse(s.table) for s in BUILTINS})
    out: list[tuple[str, list[float], Any]] = []
    with Database(connection_settings(settings), max_connections=1) as db, db.session() as session:
        calls: list[tuple[str, Callable[[], Any]]] = [
            (
                "reaper_storage_rows (all swept tables)",
                lambda: sum(session.storage_rows(tables).values()),
            ),
        ]
        for name in (REQUESTS, EPHEMERAL_REQUESTS):
            sweep = sweep_named(name)
            stmts = SweepStatements(sweep.predicate)  # as the daemon does
            params: dict[str, Any] = dict(compute_cutoffs(session, sweep, None))
            calls += [
                (
                    f'reaper_backlog_rows{{sweep="{name}"}} at the default --backlog-limit '
                    f"{settings.backlog_limit:,}",
                    lambda s=stmts, p=params: session.backlog_rows(s, p, settings.backlog_limit),
                ),
                (
                    f'reaper_backlog_oldest_seconds{{sweep="{name}"}}',
                    lambda s=stmts, p=params: round(
                        session.backlog_oldest_seconds(s, p, settings.backlog_limit) or 0.0
                    ),
                ),
            ]
        for label, call in calls:
            samples: list[float] = []
            value = None
            for _ in range(repeat):
                t0 = time.perf_counter()
                try:
                    value = call()
                except errors.DatabaseError as exc:
                    # As the daemon would: the gauge keeps its last value, the failure is logged.
                    samples.append((time.perf_counter() - t0) * 1000)
                    value = f"failed: {exc}"
                    break
                samples.append((time.perf_counter() - t0) * 1000)
            out.append((label, samples, value))
    return out

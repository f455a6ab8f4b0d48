"""The variants every scenario runs, on identical copies of its data.

(a) one plain DELETE of the rows the sweep's predicate matches: the physical limit;
(b) the ``DELETE ... WHERE key IN (SELECT key ... LIMIT n)`` loop most cleaners use;
(c) reaper's sweep, through :func:`reaper.engine.run.run_sweep`, in a child process;
(d) the heap walk's block ranges without row locks (what FOR UPDATE SKIP LOCKED costs);
(i) N plain DELETEs at once, each over its own 1/N of the heap: what N backends can do on this
machine at all, the ceiling of any sweep on N connections.

Each returns a :class:`Run`. Cutoffs for a, b and d come from the same retentions reaper uses,
by the same database clock.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench.pg import backend_cpu_seconds, compose, connect, timed
from reaper.config.load import load_config
from reaper.config.sweeps import Sweep, by_name

LIMIT_LOOP_BATCH = 5000  # a typical cleaner's batch


@dataclass
class Run:
    """One variant's figures."""

    variant: str
    rows: int = 0
    seconds: float = 0.0
    batch_seconds: list[float] = field(default_factory=list)
    rss_peak_kib: int | None = None
    rss_before_kib: int | None = None
    strategy: str | None = None
    note: str = ""
    backend_cpu: float | None = None
    wal_bytes: int | None = None
    checkpoints: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def sweep_named(name: str) -> Sweep:
    """Built-in sweep ``name`` at the default settings."""
    return by_name(load_config({}).sweeps)[name]


def cutoffs(conn: psycopg.Connection[Any], sweep: Sweep) -> dict[str, Any]:
    """The sweep's cutoffs at the default retentions, by the database clock."""
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    now = row[0]
    return {p: now - r for p, r in sweep.retentions.items()}


def plain_delete(dsn: str, sweep_name: str) -> Run:
    """(a) one DELETE of everything the predicate matches, one transaction."""
    sweep = sweep_named(sweep_name)
    with connect(dsn) as conn:
        params = cutoffs(conn, sweep)
        cpu0 = backend_cpu_seconds(conn.info.backend_pid)
        stmt = compose("plain_delete", sweep.table, sweep.predicate.where)
        secs, rows = timed(conn, stmt, params)
        cpu = backend_cpu_seconds(conn.info.backend_pid)
    return Run(
        "a. one plain DELETE",
        rows,
        secs,
        [secs],
        backend_cpu=None if cpu is None or cpu0 is None else cpu - cpu0,
    )


def limit_loop(dsn: str, sweep_name: str, key: str, max_seconds: float | None = None) -> Run:
    """(b) ``DELETE ... WHERE key IN (SELECT key ... LIMIT 5000)`` until a batch is empty
    (or ``max_seconds`` passed: then the run is marked as stopped)."""
    sweep = sweep_named(sweep_name)
    stmt = compose("limit_loop_batch", sweep.table, sweep.predicate.where, key)
    run = Run(f"b. IN (SELECT ... LIMIT {LIMIT_LOOP_BATCH}) loop")
    with connect(dsn) as conn:
        params = dict(cutoffs(conn, sweep), batch_size=LIMIT_LOOP_BATCH)
        cpu0 = backend_cpu_seconds(conn.info.backend_pid)
        t0 = time.perf_counter()
        while True:
            secs, rows = timed(conn, stmt, params)
            run.batch_seconds.append(secs)
            run.rows += rows
            if rows == 0:
                break
            if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
                run.note = f"stopped after {max_seconds:.0f} s"
                break
        run.seconds = time.perf_counter() - t0
        cpu = backend_cpu_seconds(conn.info.backend_pid)
        run.backend_cpu = None if cpu is None or cpu0 is None else cpu - cpu0
    return run


def unlocked_walk(dsn: str, sweep_name: str, blocks_per_batch: int) -> Run:
    """(d) the heap walk's ranges as plain DELETEs: no FOR UPDATE SKIP LOCKED."""
    sweep = sweep_named(sweep_name)
    stmt = compose("ctid_range_delete", sweep.table, sweep.predicate.where)
    run = Run("d. block ranges, no row locks")
    with connect(dsn) as conn:
        params = cutoffs(conn, sweep)
        (blocks,) = conn.execute(
            "SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int",
            (sweep.table,),
        ).fetchone() or (0,)
        cpu0 = backend_cpu_seconds(conn.info.backend_pid)
        t0 = time.perf_counter()
        for first in range(0, int(blocks), blocks_per_batch):
            secs, rows = timed(
                conn,
                stmt,
                dict(params, first_tid=f"({first},0)", end_tid=f"({first + blocks_per_batch},0)"),
            )
            run.batch_seconds.append(secs)
            run.rows += rows
        run.seconds = time.perf_counter() - t0
        cpu = backend_cpu_seconds(conn.info.backend_pid)
        run.backend_cpu = None if cpu is None or cpu0 is None else cpu - cpu0
    run.note = f"{blocks_per_batch} blocks per batch"
    return run


def split_delete(dsn: str, sweep_name: str, parts: int) -> Run:
    """(i) ``parts`` plain DELETEs started together on as many connections, each over its own
    contiguous 1/``parts`` of the heap (one transaction each, no batches, no row locks): the
    wall time from the start to the last one's end."""
    sweep = sweep_named(sweep_name)
    stmt = compose("ctid_range_delete", sweep.table, sweep.predicate.where)
    conns = [connect(dsn) for _ in range(parts)]
    try:
        params = cutoffs(conns[0], sweep)
        (blocks,) = conns[0].execute(
            "SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int",
            (sweep.table,),
        ).fetchone() or (0,)
        step = math.ceil(int(blocks) / parts) + 1
        done: list[tuple[float, int]] = []
        start = threading.Barrier(parts + 1)

        def one(i: int) -> None:
            start.wait()
            done.append(
                timed(
                    conns[i],
                    stmt,
                    dict(params, first_tid=f"({i * step},0)", end_tid=f"({(i + 1) * step},0)"),
                )
            )

        threads = [threading.Thread(target=one, args=(i,)) for i in range(parts)]
        for t in threads:
            t.start()
        with WaitSampler(dsn) as waits:
            start.wait()
            t0 = time.perf_counter()
            for t in threads:
                t.join()
            seconds = time.perf_counter() - t0
    finally:
        for conn in conns:
            conn.close()
    run = Run(
        f"i. {parts} plain DELETEs at once, 1/{parts} of the heap each",
        sum(rows for _, rows in done),
        seconds,
        [secs for secs, _ in done],
    )
    run.note = f"the ceiling of {parts} connections; their backends: {waits.shares()}"
    return run


class WaitSampler:
    """What the database's active backends are doing, every 5 ms while the ``with`` block
    runs (``pg_stat_activity``'s wait event, or CPU when none): where the time of statements
    that run at once goes (waiting on each other's WAL flushes, say)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.seen: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> WaitSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                for (event,) in conn.execute(
                    "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') "
                    "FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND state = 'active'"
                ):
                    self.seen[event] = self.seen.get(event, 0) + 1
                self._stop.wait(0.005)

    def shares(self, top: int = 3) -> str:
        """The ``top`` most sampled states with their shares, e.g. ``CPU 41%,
        LWLock:WALWrite 39%, IO:WALSync 10%``."""
        total = sum(self.seen.values()) or 1
        ranked = sorted(self.seen.items(), key=lambda kv: -kv[1])[:top]
        return ", ".join(f"{event} {n / total:.0%}" for event, n in ranked)


def reaper_sweep(
    dsn: str,
    sweep_name: str,
    settings: dict[str, Any] | None = None,
    label: str = "c. reaper sweep",
    on_start: Callable[[], None] | None = None,
    file_values: dict[str, Any] | None = None,
    log_level: str = "warning",
) -> Run:
    """(c) reaper's sweep in a child process (bench.child), defaults unless ``settings``
    (and ``file_values``: a config file's tables, ``[sweeps.NAME]``); the child logs at
    ``log_level`` (debug: each batch returns and logs its keys).

    ``on_start`` is called when the child is about to call run_sweep (imports and the first
    connection done)."""
    spec = {
        "dsn": dsn,
        "sweep": sweep_name,
        "settings": settings or {},
        "file": file_values or {},
        "log_level": log_level,
    }
    with subprocess.Popen(
        [sys.executable, "-m", "bench.child", json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        # Read standard error as it comes: at debug level the child logs more than a pipe
        # holds, and would wait on a full pipe while this waits on its standard output.
        errors: list[str] = []
        drain = threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True)
        drain.start()
        first = proc.stdout.readline()
        if first.strip() == "started" and on_start is not None:
            on_start()
        rest = proc.stdout.read()
        drain.join()
        err = "".join(errors)
    if proc.returncode != 0:
        raise RuntimeError(f"bench.child failed: {err.strip()[-2000:]}")
    out = json.loads((first + rest).strip().splitlines()[-1])
    if out["outcome"] != "success":
        raise RuntimeError(f"reaper sweep failed: {out['error']}")
    return Run(
        label,
        out["rows"],
        out["wall"],
        out["batch_seconds"],
        rss_peak_kib=out["rss_peak_kib"],
        rss_before_kib=out["rss_before_kib"],
        strategy=out["strategy"],
        backend_cpu=out.get("backend_cpu"),
        extra={
            "throttled": out["throttled"],
            "batch_ends": out["batch_ends"],
            "stopped_by": out["stopped_by"],
        },
    )


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of ``values``; NaN when empty."""
    if not values:
        return math.nan
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]

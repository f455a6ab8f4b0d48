"""Variant c in its own process: reaper's sweep through the real engine, measured alone.

``python -m bench.child '{"dsn": ..., "sweep": ..., "settings": {...}}'`` (and optionally
``"file": {...}``, a config file's tables such as ``sweeps``, and ``"log_level"``) runs
:func:`reaper.engine.run.run_sweep` with the built-in sweep of that name and prints one JSON line:
the result, the wall seconds around run_sweep, and the process's resident memory before the
sweep and at its peak (``ru_maxrss``), so that the figure is reaper's alone (the benchmark's
own lists of latencies never count against it).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from bench.pg import backend_cpu_seconds
from reaper import log
from reaper.config.engine import engine_options
from reaper.config.load import load_config
from reaper.config.sweeps import by_name
from reaper.db import ConnectionSettings, Database
from reaper.engine.run import run_sweep
from reaper.metrics import Metrics
from reaper.vocab import ThrottleReason


def rss_kib() -> int:
    """Resident memory now (KiB), from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main(argv: list[str]) -> int:
    spec: dict[str, Any] = json.loads(argv[0])
    log.configure(spec.get("log_level", "warning"), json=True)
    config = load_config({"dsn": spec["dsn"], **spec.get("settings", {})}, spec.get("file"))
    settings = config.settings
    sweep = by_name(config.sweeps)[spec["sweep"]]
    db = Database(
        ConnectionSettings(
            dsn=settings.dsn or "",
            statement_timeout=settings.statement_timeout,
            lock_timeout=settings.lock_timeout,
            idle_in_transaction_session_timeout=settings.idle_in_transaction_session_timeout,
            synchronous_commit=settings.synchronous_commit,
        ),
        max_connections=1,  # one server process, whose CPU time is read from /proc
    )
    with db:
        with db.session() as session:  # the pool's first connection, outside the timing
            session.now()
            pid = session.backend_pid
        cpu0 = backend_cpu_seconds(pid)
        before = rss_kib()
        registry = CollectorRegistry()
        metrics = Metrics([sweep], registry)
        batch_ends: list[tuple[float, int]] = []
        print("started", flush=True)
        t0 = time.perf_counter()
        result = run_sweep(
            db,
            sweep,
            engine_options(settings),
            metrics=metrics,
            on_batch=lambda r: batch_ends.append((time.time(), r.rows)),
        )
        wall = time.perf_counter() - t0
        cpu1 = backend_cpu_seconds(pid)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = result.as_dict()
    out.update(
        wall=wall,
        batch_seconds=result.batch_seconds,
        rss_before_kib=before,
        rss_peak_kib=peak,
        batch_ends=batch_ends,
        throttled={
            r: registry.get_sample_value(
                "reaper_throttled_seconds_total", {"sweep": sweep.name, "reason": r}
            )
            for r in ThrottleReason
        },
        backend_cpu=None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Resident memory of `reaper run` after 10 sweep runs and after 1,000, on the demo's data.

    .venv/bin/python bench/daemon_memory.py [--runs 1000] [--small]

Starts a PostgreSQL as `make demo` does (REAPER_DSN, or an embedded pgserver), seeds the
testnet audit's rows (reaper.dev.demo), runs the real `reaper run` process with 100 ms
intervals (the shortest reaper accepts) while a writer keeps adding garbage (so that runs
delete rows, not just find nothing), reads the process's VmRSS from /proc at 10 runs and
at --runs runs, and prints both. Also prints the time from SIGTERM to exit. A figure to
read, not a pass/fail.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reaper.dev import demo, devserver
from tests.support.daemon import (
    free_port,
    http_get,
    metric_samples,
    reaper_command,
    wait_for,
)


def rss_kib(pid: int) -> int:
    """VmRSS of ``pid`` in KiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def runs(port: int) -> int:
    status, body = http_get(port, "/metrics")
    return int(sum(metric_samples(body, "reaper_sweep_runs_total").values())) if status else 0


def trickle(dsn: str, stop: threading.Event) -> None:
    """Add a little garbage every 100 ms: expired router leases and lapsed sessions."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        i = 0
        while not stop.wait(0.1):
            i += 1
            conn.execute(
                "INSERT INTO routers (router_id, address, lease_expires_at) "
                "SELECT 'garbage-t' || %s || '-' || g, 'a', now() - interval '40 days' "
                "FROM generate_series(1, 20) g",
                (i,),
            )
            conn.execute(
                "INSERT INTO nodes (peer_id, enrolled_at, expires_at) "
                "SELECT 'garbage-t' || %s || '-' || g, now() - interval '9 days', "
                "now() - interval '4 days' FROM generate_series(1, 20) g",
                (i,),
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--small", action="store_true", help="a tenth of the demo's rows")
    args = parser.parse_args()
    sizes = demo.Sizes()
    if args.small:
        sizes = demo.Sizes(**{k: max(1, v // 10) for k, v in vars(sizes).items()})
    with devserver.server("REAPER_DSN") as server_dsn:
        dsn = devserver.create_database(server_dsn)
        try:
            devserver.load_schema(dsn)
            t0 = time.monotonic()
            demo.seed(dsn, sizes)
            print(f"seeded the demo's rows in {time.monotonic() - t0:.1f} s")
            port = free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("REAPER_")}
            env.update(REAPER_LOG_LEVEL="warning", REAPER_LOG_FORMAT="json")
            log_path = Path(tempfile.gettempdir()) / "reaper-daemon-memory.log"
            log_file = log_path.open("wb")
            print(f"reaper run's log: {log_path}")
            proc = subprocess.Popen(
                [
                    *reaper_command(),
                    "run",
                    "--dsn",
                    dsn,
                    "--listen",
                    f"127.0.0.1:{port}",
                    "--interval",
                    "100ms",
                    "--jitter",
                    "0",
                    "--gauge-interval",
                    "1s",
                ],
                env=env,
                stderr=log_file,
            )
            stop = threading.Event()
            writer = threading.Thread(target=trickle, args=(dsn, stop), daemon=True)
            writer.start()
            try:
                figures = []
                for target in (10, args.runs):

                    def reached(t: int = target) -> int | bool:
                        if proc.poll() is not None:
                            raise RuntimeError(f"reaper run exited with {proc.returncode}")
                        return (r := runs(port)) >= t and r

                    n = wait_for(f"{target} runs", reached, limit=3600)
                    figures.append((n, rss_kib(proc.pid)))
                t0 = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                code = proc.wait(timeout=60)
                shutdown = time.monotonic() - t0
            finally:
                stop.set()
                if proc.poll() is None:
                    proc.kill()
            print("\n| sweep runs | resident memory (VmRSS) |")
            print("|---:|---:|")
            for n, kib in figures:
                print(f"| {n:,} | {kib / 1024:.1f} MiB |")
            growth = (figures[1][1] - figures[0][1]) / 1024
            print(f"\ngrowth from {figures[0][0]} to {figures[1][0]} runs: {growth:+.1f} MiB")
            print(f"SIGTERM to exit: {shutdown:.2f} s (exit code {code})")
        finally:
            devserver.drop_database(dsn)
    return 0


if __name__ == "__main__":
    sys.exit(main())

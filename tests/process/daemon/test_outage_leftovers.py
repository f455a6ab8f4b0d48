"""Outages leave nothing behind: a daemon's sockets are as many after any number of faults
(a network gone silent, a server that refuses connections, its sessions killed) as its pool
and its port need, none of them half-closed; and after each fault it deletes again.

A real `reaper run` process, a real PostgreSQL behind a TCP proxy that the test silences,
its sockets read from /proc.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from reaper.daemon.scheduler import MAX_PARALLEL_SWEEPS
from tests.support.daemon import (
    free_port,
    http_get,
    scalar,
    seed_routers,
    start_reaper,
    wait_for,
)
from tests.support.netfaults import SilentProxy

pytestmark = pytest.mark.slow

# The pool's connections at most (the sweeps', the probe's, the gauges') and the HTTP port.
MOST_SOCKETS = MAX_PARALLEL_SWEEPS + 2 + 1
# /proc/net/tcp's state of a socket whose peer closed it and that its owner did not.
CLOSE_WAIT = "08"


def sockets(pid: int) -> tuple[int, int]:
    """``(TCP sockets, of which half-closed)`` that process ``pid`` holds."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    total = half_closed = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                total += 1
                half_closed += fields[3] == CLOSE_WAIT
    return total, half_closed


def deletes_again(reaper: Any, conn: psycopg.Connection[Any], port: int) -> None:
    """New garbage, and wait until the daemon, ready again, deleted it."""
    seed_routers(conn, garbage=5, keep=0, prefix=f"r{time.monotonic_ns()}-")
    wait_for("/readyz 200", lambda: http_get(port, "/readyz")[0] == 200, limit=90)
    wait_for(
        "the garbage deleted",
        lambda: (
            scalar(conn, "SELECT count(*) FROM routers WHERE router_id LIKE '%%garbage-%%'") == 0
        ),
        limit=90,
    )


def settled(pid: int) -> tuple[int, int]:
    """The daemon's TCP sockets and how many are half-closed, once none is half-closed (10 s
    at most): a connection the server ended a moment ago is closed at the pool's next look,
    and a leak is one that stays."""
    deadline = time.monotonic() + 10
    while True:
        total, half_closed = sockets(pid)
        if half_closed == 0 or time.monotonic() > deadline:
            return total, half_closed
        time.sleep(0.5)


def test_sockets_stay_flat_across_outages(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    target = conninfo_to_dict(dsn)
    if str(target.get("host", "/")).startswith("/"):
        pytest.skip("the proxy test needs a server on TCP (REAPER_TEST_DSN)")
    proxy = SilentProxy(str(target["host"]), int(target.get("port") or 5432))
    port = free_port()
    through = make_conninfo(dsn, host="127.0.0.1", port=proxy.port)
    # The watchdog fires 3 + 5 s into a silent statement: every outage below outlasts it.
    reaper = start_reaper(
        [
            "run",
            "--dsn",
            through,
            "--listen",
            f"127.0.0.1:{port}",
            "--jitter",
            "0",
            "--interval",
            "2s",
            "--gauge-interval",
            "2s",
            "--statement-timeout",
            "3s",
            "--connect-timeout",
            "3s",
            "--failure-backoff",
            "1s",
            "--max-failure-backoff",
            "2s",
            "--max-eligible-fraction",
            "1",
        ],
        tmp_path,
    )
    pid = reaper.proc.pid
    seen: list[tuple[str, int, int]] = []
    try:
        deletes_again(reaper, conn, port)
        seen.append(("start", *settled(pid)))
        for i in range(3):
            proxy.pause()  # silent: every packet held, no connection closed
            time.sleep(15)
            proxy.resume()
            deletes_again(reaper, conn, port)
            seen.append((f"silent {i + 1}", *settled(pid)))
        for i in range(2):
            # reaper's server sessions killed, as a restart or an operator would.
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'reaper' AND pid <> pg_backend_pid()"
            )
            deletes_again(reaper, conn, port)
            seen.append((f"killed {i + 1}", *settled(pid)))
        print("\n" + "\n".join(f"{what}: {n} TCP sockets, {h} half-closed" for what, n, h in seen))
        assert any(e["event"].startswith("watchdog") for e in reaper.logs())
        for what, total, half_closed in seen:
            assert half_closed == 0, (what, seen)
            assert total <= MOST_SOCKETS, (what, seen)
    finally:
        assert reaper.terminate() == 0
        proxy.close()

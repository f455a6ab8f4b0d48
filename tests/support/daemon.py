"""Helpers for the daemon's tests: waiting on real conditions, free ports, `reaper run`
processes, and seeding a handful of garbage and live rows."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

# Waits poll a real condition; the limit only ends a test that would otherwise hang (the
# machine is shared and slow at times, so it is generous). Never a speed assertion.
WAIT_LIMIT_SECONDS = 60.0


def wait_for(what: str, check: Callable[[], Any], limit: float = WAIT_LIMIT_SECONDS) -> Any:
    """Poll ``check`` until it returns something truthy; return that. AssertionError naming
    ``what`` when it never does."""
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(port: int, path: str) -> tuple[int, str]:
    """(status, body) of GET http://127.0.0.1:port/path; status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, ""


def metric_samples(text: str, name: str) -> dict[str, float]:
    """``{labels-text: value}`` of metric ``name`` in a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            out[key[len(name) :]] = float(value)
    return out


def reaper_command() -> list[str]:
    exe = shutil.which("reaper", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "reaper"]


@dataclass
class ReaperProcess:
    """A `reaper` process with its stderr (JSON log lines) in a file."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    port: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def logs(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    out.append(json.loads(line))
        return out

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.logs() if e.get("event") == name]

    def terminate(self, limit: float = WAIT_LIMIT_SECONDS) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=limit)


# Every process start_reaper started, so that a failing test leaves none running.
STARTED: list[subprocess.Popen[bytes]] = []


def kill_leftovers() -> None:
    """SIGKILL the processes start_reaper started that still run (a failed test's)."""
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def start_reaper(
    args: list[str], tmp_path: Path, env: dict[str, str] | None = None, name: str = "reaper"
) -> ReaperProcess:
    """Start ``reaper <args>`` with JSON logs to a file under ``tmp_path``."""
    log_path = tmp_path / f"{name}-{time.monotonic_ns()}.log"
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith("REAPER_") or k == "REAPER_TEST_DSN"
    }
    full_env.update({"REAPER_LOG_FORMAT": "json"}, **(env or {}))
    with log_path.open("wb") as fh:
        proc = subprocess.Popen(
            [*reaper_command(), *args], stdout=subprocess.DEVNULL, stderr=fh, env=full_env
        )
    STARTED.append(proc)
    return ReaperProcess(proc, log_path)


def scalar(conn: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = conn.execute(query, params).fetchone()  # type: ignore[call-overload]
    return None if row is None else row[0]


def seed_routers(
    conn: psycopg.Connection[Any],
    garbage: int,
    keep: int = 3,
    prefix: str = "",
    age: str = "31 days",
) -> None:
    """``garbage`` router leases expired ``age`` ago (past the 30-day retention), ``keep``
    live ones."""
    conn.execute(
        "INSERT INTO routers (router_id, address, lease_expires_at) "
        "SELECT %s || 'garbage-' || i, 'a', now() - %s::interval - i * interval '1 second' "
        "FROM generate_series(1, %s) i",
        (prefix, age, garbage),
    )
    conn.execute(
        "INSERT INTO routers (router_id, address, lease_expires_at) "
        "SELECT %s || 'keep-' || i, 'a', now() + interval '1 hour' FROM generate_series(1, %s) i",
        (prefix, keep),
    )


def wait_for_delete_in_flight(conn: psycopg.Connection[Any]) -> None:
    """Wait until a reaper session runs a DELETE in ``conn``'s database: between two batches
    the runner may read the server (the pacer's sample) for a few milliseconds."""
    wait_for(
        "the next batch in flight",
        lambda: scalar(
            conn,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'reaper'"
            " AND datname = %s AND state = 'active' AND query ~* 'delete'",
            conn.info.dbname,
        ),
    )


def count(conn: psycopg.Connection[Any], table: str, key: str, like: str) -> int:
    return int(scalar(conn, f"SELECT count(*) FROM {table} WHERE {key} LIKE %s", like))


def reaper_sessions(conn: psycopg.Connection[Any], dbname: str) -> int:
    """Sessions with application_name reaper connected to ``dbname``."""
    return int(
        scalar(
            conn,
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = 'reaper' AND datname = %s",
            dbname,
        )
    )

"""Each sweep's wait for the database starts when the sweep starts waiting: with more sweeps
than worker threads and a database that does not answer, the sweeps that waited for a thread
fail with the first ones (as soon as a connection attempt made since they were due failed),
not one connect timeout later per round of threads.

A real Daemon, a real PostgreSQL behind a TCP proxy that forwards nothing (connection
attempts hang until connect_timeout).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import structlog
from prometheus_client import CollectorRegistry
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from reaper.config.settings import build_settings
from reaper.daemon.scheduler import MAX_PARALLEL_SWEEPS, Daemon
from tests.support import TEST_DEFAULTS, enabled
from tests.support.netfaults import SilentProxy

pytestmark = [pytest.mark.slow, pytest.mark.fresh_db]

CONNECT_TIMEOUT = 8.0


def test_sweeps_queued_behind_others_fail_with_them(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    target = conninfo_to_dict(dsn)
    if str(target.get("host", "/")).startswith("/"):
        pytest.skip("the proxy test needs a server on TCP (REAPER_TEST_DSN)")
    conn.execute("CREATE TABLE events (created_at timestamptz NOT NULL)")
    proxy = SilentProxy(str(target["host"]), int(target.get("port") or 5432))
    proxy.pause()
    through = make_conninfo(dsn, host="127.0.0.1", port=proxy.port)
    settings = build_settings(
        {
            "dsn": through,
            **TEST_DEFAULTS,
            "interval": "1h",
            "jitter": "0",
            "listen": "127.0.0.1:0",
            "gauge_interval": "1h",
            "connect_timeout": f"{CONNECT_TIMEOUT:.0f}s",
        },
        {
            "sweeps": {
                "events": {
                    "table": "public.events",
                    "reason": "expired",
                    "age": "created_at",
                    "retention": "30d",
                }
            }
        },
    )
    sweeps = enabled(settings)
    assert len(sweeps) > MAX_PARALLEL_SWEEPS  # some wait for a worker thread
    daemon = Daemon(settings, sweeps, registry=CollectorRegistry())
    failed_at: dict[str, float] = {}
    try:
        with structlog.testing.capture_logs() as logs:
            started = time.monotonic()
            daemon.start()
            deadline = started + 4 * CONNECT_TIMEOUT
            while len(failed_at) < len(sweeps) and time.monotonic() < deadline:
                for s in sweeps:
                    value = daemon.metrics.registry.get_sample_value(
                        "reaper_sweep_runs_total", {"sweep": s.name, "outcome": "failure"}
                    )
                    if value and s.name not in failed_at:
                        failed_at[s.name] = time.monotonic() - started
                time.sleep(0.05)
    finally:
        daemon.stop(timedelta(seconds=5))
        proxy.close()
    print(
        "\n" + ", ".join(f"{n} {t:.1f} s" for n, t in sorted(failed_at.items(), key=lambda x: x[1]))
    )
    assert set(failed_at) == {s.name for s in sweeps}
    # One connect timeout (and some scheduling), not one per round of worker threads.
    assert max(failed_at.values()) < CONNECT_TIMEOUT + 4
    failures = [e for e in logs if e["event"] == "sweep_failed"]
    assert {e["error_type"] for e in failures} == {"ConnectionFailed"}
    assert all("connection timeout expired" in e["error"] for e in failures), failures
    # The first failed attempt was logged once, with its reason.
    (connect,) = [e for e in logs if e["event"] == "database_connect_failed"]
    assert "timeout" in connect["error"]

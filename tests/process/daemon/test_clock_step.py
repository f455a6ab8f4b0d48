"""The host's wall clock steps a year ahead under a running daemon (as NTP steps a VM): its
jobs go on, ``/healthz`` stays 200 and the heartbeat never lapses. The daemon runs under
libfaketime, whose offset a file holds (re-read on every call); its monotonic clock, which
the health check measures by, is left alone. The trigger's catch-up itself is tried in
milliseconds in tests/unit/config/test_triggers.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.daemon import free_port, http_get, start_reaper, wait_for

pytestmark = pytest.mark.slow
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
# Longer than /healthz's limit without a heartbeat (HEALTHY_HEARTBEAT_AGE_SECONDS).
WATCH_SECONDS = 40.0


def test_a_year_long_step_of_the_host_clock_does_not_stall_the_daemon(
    dsn: str, tmp_path: Path
) -> None:
    if not LIBFAKETIME.exists():
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    port = free_port()
    reaper = start_reaper(
        ["run", "--listen", f"127.0.0.1:{port}", "--dsn", dsn, "--interval", "5s"],
        tmp_path,
        env={
            "LD_PRELOAD": str(LIBFAKETIME),
            "FAKETIME_TIMESTAMP_FILE": str(offset),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        },
    )
    try:
        wait_for("the port", lambda: http_get(port, "/healthz")[0] == 200)
        offset.write_text("+365d\n")
        answers = []
        deadline = time.monotonic() + WATCH_SECONDS
        while time.monotonic() < deadline:
            answers.append(http_get(port, "/healthz"))
            time.sleep(1)
        assert {code for code, _ in answers} == {200}, answers
        assert reaper.proc.poll() is None
    finally:
        assert reaper.terminate() == 0

"""The HTTP port under abuse: slow clients, oversized headers, more connections than the limit.

The invariant: no client of the port can crash or starve the daemon. Any number of slow or
oversized clients leaves its memory within a few MiB of what it was, and ``/metrics`` answers
a well-behaved scraper throughout. Tried against the real ``reaper run`` process.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from reaper.daemon.http import (
    MAX_CONNECTIONS,
    MAX_HEADER_COUNT,
    READ_TIMEOUT_SECONDS,
)
from tests.support.daemon import free_port, http_get, kill_leftovers, start_reaper, wait_for
from tests.support.http_port import _server

# The repro: ~98 header lines of 65 KB each, never finished.
BIG_LINE = b"X-Filler: " + b"a" * 65_000 + b"\r\n"
HEADER_LINES = 98
# Well past the connection limit.
SLOW_CLIENTS = 4 * MAX_CONNECTIONS
OVERSIZED_CLIENTS = 60
# "Within a few MiB of its baseline."
RSS_SLACK_BYTES = 8 * 1024 * 1024


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(autouse=True)
def _no_process_left() -> Iterator[None]:
    yield
    kill_leftovers()


def _connect(port: int) -> socket.socket | None:
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        return None
    s.setblocking(False)
    return s


def _push(s: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):
        s.send(data)


def _scrape_ok(port: int) -> bool:
    status, body = http_get(port, "/metrics")
    return status == 200 and "reaper_sweep_runs_total" in body


def test_slow_and_oversized_clients_leave_memory_flat_and_metrics_answering(
    dsn: str, tmp_path: Path
) -> None:
    port = free_port()
    reaper = start_reaper(["run", "--listen", f"127.0.0.1:{port}", "--dsn", dsn], tmp_path)
    pid = reaper.proc.pid
    try:
        wait_for("the port", lambda: _scrape_ok(port))
        for _ in range(5):
            assert _scrape_ok(port)
        baseline = rss_bytes(pid)
        peak = baseline
        clients: list[socket.socket] = []
        try:
            for i in range(SLOW_CLIENTS + OVERSIZED_CLIENTS):
                s = _connect(port)
                if s is None:
                    continue
                clients.append(s)
                _push(s, b"GET /metrics HTTP/1.1\r\nHost: reaper\r\n")
                if i % 5 == 0:
                    for _ in range(HEADER_LINES):
                        _push(s, BIG_LINE)
                if i % 20 == 0:
                    peak = max(peak, rss_bytes(pid))
                    assert _scrape_ok(port), "a scraper is answered while clients pile up"
            # Keep trickling (one header byte at a time) and scraping for a while.
            for _ in range(6):
                for s in clients:
                    _push(s, b"X")
                assert _scrape_ok(port)
                peak = max(peak, rss_bytes(pid))
                time.sleep(0.5)
        finally:
            for s in clients:
                s.close()
        assert _scrape_ok(port)
        after = wait_for("memory to settle", lambda: (r := rss_bytes(pid)) and r, limit=10)
        assert reaper.proc.poll() is None
    finally:
        assert reaper.terminate() == 0
    mib = 2**20
    figures = f"baseline {baseline / mib:.1f} MiB, peak {peak / mib:.1f}, after {after / mib:.1f}"
    print(figures)
    assert peak - baseline < RSS_SLACK_BYTES, figures
    assert after - baseline < RSS_SLACK_BYTES




def test_a_trickling_client_is_cut_at_the_read_deadline() -> None:
    """Sending a byte a second keeps a connection "active": it is closed anyway, once its
    request has taken longer than the read timeout to arrive."""
    server = _server()
    try:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=1)
        started = time.monotonic()
        closed = False
        s.sendall(b"GET /metrics HTTP/1.1\r\n")
        while time.monotonic() - started < READ_TIMEOUT_SECONDS + 15:
            try:
                s.sendall(b"X")
                if s.recv(1024) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
        s.close()
        assert closed, "the trickling client was never cut"
        assert http_get(server.port, "/metrics")[0] == 200
    finally:
        server.stop()


def test_oversized_headers_get_431() -> None:
    server = _server()
    try:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        with contextlib.suppress(OSError):
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + BIG_LINE)
        answer = b""
        with contextlib.suppress(OSError):
            answer = s.recv(200)
        s.close()
        assert answer == b"" or b" 431 " in answer.split(b"\r\n")[0]
        assert http_get(server.port, "/metrics")[0] == 200
    finally:
        server.stop()


def test_too_many_header_lines_get_431() -> None:
    server = _server()
    try:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        lines = b"".join(b"X-%d: 1\r\n" % i for i in range(MAX_HEADER_COUNT + 1))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + lines + b"\r\n")
        answer = s.recv(200)
        s.close()
        assert b" 431 " in answer.split(b"\r\n")[0], answer
        s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        lines = b"".join(b"X-%d: 1\r\n" % i for i in range(MAX_HEADER_COUNT - 2))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + lines + b"\r\n")
        assert b" 200 " in s.recv(200).split(b"\r\n")[0]
        s.close()
    finally:
        server.stop()


def _get(port: int, auth: tuple[str, str] | None) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_basic_auth_from_a_web_config_file(tmp_path: Path) -> None:
    import bcrypt

    config = tmp_path / "web.yml"
    hashed = bcrypt.hashpw(b"scrape-pw", bcrypt.gensalt(rounds=4)).decode()
    config.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    server = _server(config)
    try:
        assert _get(server.port, None) == 401
        assert _get(server.port, ("prometheus", "wrong")) == 401
        assert _get(server.port, ("nobody", "scrape-pw")) == 401
        assert _get(server.port, ("prometheus", "scrape-pw")) == 200
        assert _get(server.port, ("prometheus", "scrape-pw")) == 200  # remembered
        assert _get(server.port, ("prometheus", "scrape-pwx")) == 401
    finally:
        server.stop()


def test_reaper_run_refuses_a_tls_web_config_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n")
    port = free_port()
    reaper = start_reaper(["run", "--listen", f"127.0.0.1:{port}", "--web-config-file",
                           str(config), "--dsn", "postgresql://x@127.0.0.1:1/x"], tmp_path)
    assert reaper.proc.wait(timeout=60) == 2
    lines = [line for line in reaper.log_path.read_text().splitlines() if line.strip()]
    assert len(lines) == 1 and "tls_server_config" in lines[0], lines

"""The real `reaper run` port under crowds: connections that churn, addresses that guess
passwords, and web config files changed under a running daemon (SIGHUP).

The bounds here only end a test that would hang; the figures are in bench/http_abuse.py.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import signal
import socket
import threading
from pathlib import Path
from typing import Any

from tests.support.daemon import free_port, start_reaper, wait_for

# A scraper's answer comes well within this (the bound ends a test that would hang).
ANSWER_LIMIT_SECONDS = 5.0
# A probe under churn: how long it may wait is not what is tried, an answer is.
PROBE_LIMIT_SECONDS = 30.0
HASH_COST = 10


def _request(path: str = "/metrics", auth: tuple[str, str] | None = None) -> bytes:
    head = f"GET {path} HTTP/1.1\r\nHost: reaper\r\n"
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        head += f"Authorization: Basic {token}\r\n"
    return (head + "\r\n").encode()


def _answer(
    port: int,
    auth: tuple[str, str] | None = None,
    source: str = "127.0.0.1",
    limit: float = ANSWER_LIMIT_SECONDS,
    path: str = "/metrics",
) -> tuple[int, bytes]:
    """(status, head) of one request on a new connection; status 0: closed with no answer,
    reset, or no answer within ``limit``."""
    try:
        with socket.create_connection(
            ("127.0.0.1", port), timeout=limit, source_address=(source, 0)
        ) as s:
            s.sendall(_request(path, auth))
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                head += chunk
    except OSError:
        return 0, b""
    line = head.split(b"\r\n")[0].split(b" ")
    return (int(line[1]) if len(line) > 1 and line[1].isdigit() else 0), head


def _run(port: int, tmp_path: Path, dsn: str, *extra: str) -> Any:
    reaper = start_reaper(["run", "--listen", f"127.0.0.1:{port}", "--dsn", dsn, *extra], tmp_path)
    wait_for("the port", lambda: _answer(port, path="/healthz")[0] in (200, 401, 503))
    return reaper


def _hash(password: str) -> str:
    import bcrypt

    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=HASH_COST)).decode()


def test_no_fresh_probe_gets_an_empty_reply_under_churn(dsn: str, tmp_path: Path) -> None:
    """64 looping keep-alive connections and 8 churners once left 0-5 of about 40 fresh
    probes with an empty reply: the probe was closed to make room before its answer."""
    port = free_port()
    reaper = _run(port, tmp_path, dsn)
    stop = threading.Event()

    def looping() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_LIMIT_SECONDS)
        while not stop.is_set():
            try:
                conn.request("GET", "/metrics")
                conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                conn.close()
        conn.close()

    def churning(n: int) -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                if n % 2:
                    s.sendall(_request())
                s.close()

    threads = [threading.Thread(target=looping) for _ in range(64)]
    threads += [threading.Thread(target=churning, args=(n,)) for n in range(8)]
    try:
        for t in threads:
            t.start()
        statuses = [_answer(port, limit=PROBE_LIMIT_SECONDS)[0] for _ in range(80)]
    finally:
        stop.set()
        for t in threads:
            t.join()
        assert reaper.terminate() == 0
    assert statuses == [200] * len(statuses), statuses


def test_a_right_password_not_yet_verified_passes_while_100_addresses_guess(
    dsn: str, tmp_path: Path
) -> None:
    """About 100 addresses guessing once kept the one bcrypt check busy: a right password
    not yet verified (every scraper after a restart) got 503 on 41 of 41 tries. Each try
    here names a user never verified, so each needs its own check."""
    hashed = _hash("scrape-pw")
    config = tmp_path / "web.yml"
    config.write_text(
        "basic_auth_users:\n" + "".join(f"  scraper-{i}: '{hashed}'\n" for i in range(12))
    )
    port = free_port()
    reaper = _run(port, tmp_path, dsn, "--web-config-file", str(config))
    stop = threading.Event()
    seen: set[int] = set()

    def guess(n: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            source = f"127.0.{10 + n // 50}.{n % 50 + 1}"
            seen.add(_answer(port, ("scraper-0", f"guess-{n}-{i}"), source, 30)[0])

    threads = [threading.Thread(target=guess, args=(n,)) for n in range(100)]
    try:
        for t in threads:
            t.start()
        wait_for("guesses answered", lambda: 401 in seen)
        statuses = [
            _answer(port, (f"scraper-{i}", "scrape-pw"), "127.0.0.2", PROBE_LIMIT_SECONDS)[0]
            for i in range(1, 12)
        ]
    finally:
        stop.set()
        for t in threads:
            t.join()
        assert reaper.terminate() == 0
    assert statuses == [200] * len(statuses), statuses
    assert seen <= {401, 503}, seen  # never a 500, never a reset


def test_a_web_config_is_read_again_on_sighup_and_a_bad_one_changes_nothing(
    dsn: str, tmp_path: Path
) -> None:
    """The headers of http_server_config are sent with every answer; SIGHUP reads the file
    again; a deep or malformed file is one reload_rejected line and the port keeps its
    users and headers."""
    config = tmp_path / "web.yml"
    old, new = ("prometheus", "old-pw"), ("prometheus", "new-pw")
    config.write_text(
        f"basic_auth_users:\n  prometheus: '{_hash('old-pw')}'\n"
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
    )
    port = free_port()
    reaper = _run(port, tmp_path, dsn, "--web-config-file", str(config))
    try:
        status, head = _answer(port, old)
        assert status == 200 and b"X-Frame-Options: deny" in head
        for status, auth, path in ((401, None, "/metrics"), (404, old, "/nope")):
            answered, head = _answer(port, auth, path=path)
            assert answered == status and b"X-Frame-Options: deny" in head

        bad = [
            "basic_auth_users: " + "[" * 20_000 + "]" * 20_000 + "\n",
            "basic_auth_users:\n\t- a\n",
            f"basic_auth_users:\n  prometheus: '{_hash('new-pw')}'\nhttp_server_config:\n"
            "  http2: true\n",
        ]
        for n, text in enumerate(bad, start=1):
            config.write_text(text)
            reaper.proc.send_signal(signal.SIGHUP)
            rejected = wait_for(
                "reload_rejected", lambda n=n: len(reaper.events("reload_rejected")) == n
            )
            assert rejected
            error = reaper.events("reload_rejected")[-1]["error"]
            assert "--web-config-file" in error and "\n" not in error, error
            status, head = _answer(port, old)
            assert status == 200 and b"X-Frame-Options: deny" in head
            assert _answer(port, new)[0] == 401
        assert not reaper.events("settings_reloaded")

        config.write_text(
            f"basic_auth_users:\n  prometheus: '{_hash('new-pw')}'\n"
            "http_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n"
        )
        reaper.proc.send_signal(signal.SIGHUP)
        wait_for("settings_reloaded", lambda: reaper.events("settings_reloaded"))
        wait_for("the new password", lambda: _answer(port, new)[0] == 200)
        status, head = _answer(port, new)
        assert b"X-Frame-Options: sameorigin" in head
        assert _answer(port, old)[0] == 401
        assert reaper.proc.poll() is None
    finally:
        assert reaper.terminate() == 0

"""The HTTP port's web config file and basic auth, decided without a socket: which files and
which values are refused at load (one line), and what each kind of credential gets.

The sockets and the real ``reaper run`` are tried in tests/process/daemon/test_http_port.py.
"""

from __future__ import annotations

import base64
import os
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, make_wsgi_app

from reaper.daemon.answers import (
    AUTHENTICATED,
    MAX_METRICS_KINDS,
    METRICS_REUSE_SECONDS,
    SharedRenders,
    make_app,
)
from reaper.daemon.auth import (
    FAILURES_BEFORE_PENALTY,
    MAX_FAILURE_PENALTY_SECONDS,
    BasicAuth,
    Verdict,
)
from reaper.daemon.health import Health, NotReady
from reaper.daemon.webconfig import MAX_BCRYPT_COST, MAX_WEB_CONFIG_BYTES, WebConfig
from reaper.errors import ConfigError
from tests.support.http_port import _server

# Fixed (bcrypt.hashpw(b"scrape-pw", bcrypt.gensalt(rounds=4))): the test ids that show it
# are then the same in every pytest-xdist worker.
HASH4 = "$2b$04$Y9X1jOLsCQ/pMA8vfcTzUeSOA2h.WRkecvsnja5ydF6hOK4eJ0.sC"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n", ["tls_server_config"]),
        ("basic_auth_users:\n  prometheus: plain-password\n", ["bcrypt"]),
        ("basic_auth_users: [a, b]\n", ["basic_auth_users"]),
        ("users: {}\n", ["unknown key"]),
        ("basic_auth_users: {a: [\n", ["not valid YAML"]),
        ("- a\n", ["mapping"]),
        # No user: the port would be open though a file was given to guard it.
        ("basic_auth_users: {}\n", ["names no user"]),
        ("basic_auth_users:\n", ["names no user"]),
        ("", ["names no user"]),
        ("# nothing yet\n", ["names no user"]),
        ("http_server_config: {}\n", ["names no user"]),
        # Hashes bcrypt cannot check, or that cost more than a second or so per check.
        (f"basic_auth_users: {{a: '{HASH4[:-1]}'}}\n", ["bcrypt"]),
        ("basic_auth_users: {a: 12}\n", ["bcrypt"]),
        (f"basic_auth_users: {{a: '{HASH4.replace('$04$', '$13$')}'}}\n", ["cost 13"]),
        (f"basic_auth_users: {{a: '{HASH4.replace('$04$', '$31$')}'}}\n", ["cost 31"]),
        (f"basic_auth_users: {{a: '{HASH4.replace('$04$', '$03$')}'}}\n", ["cost 3"]),
        # A name basic auth cannot carry.
        (f"basic_auth_users: {{'a:b': '{HASH4}'}}\n", ["':'"]),
        (f"basic_auth_users: {{'': '{HASH4}'}}\n", ["user name"]),
        (f"basic_auth_users: {{7: '{HASH4}'}}\n", ["user name"]),
        ("\xff\xfe", ["YAML"]),  # not UTF-8
    ],
)
def test_a_bad_web_config_file_is_one_line(tmp_path: Path, text: str, words: list[str]) -> None:
    config = tmp_path / "web.yml"
    config.write_bytes(text.encode("latin-1") if text.startswith("\xff") else text.encode())
    with pytest.raises(ConfigError) as exc:
        _server(config)
    message = str(exc.value)
    assert "\n" not in message and "--web-config-file" in message
    for w in words:
        assert w in message


def test_a_missing_web_config_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        _server(tmp_path / "nope.yml")


def test_the_highest_cost_accepted_loads(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    hashed = HASH4.replace("$04$", f"${MAX_BCRYPT_COST:02d}$")
    config.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n  other: '{HASH4}'\n")
    assert set(WebConfig.load(config).basic_auth_users) == {"prometheus", "other"}


def _special_files(tmp_path: Path) -> list[tuple[Path, str]]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.yml"
    big.write_text("# " + "x" * MAX_WEB_CONFIG_BYTES + "\n")
    return [
        (Path("/dev/zero"), "not a regular file"),  # never ends
        (Path("/dev/null"), "not a regular file"),
        (fifo, "not a regular file"),  # open() would wait for a writer
        (tmp_path, "a directory"),
        (big, "larger than 64 KiB"),
    ]


def test_a_web_config_that_is_no_regular_file_or_too_large_is_refused_at_once(
    tmp_path: Path,
) -> None:
    for path, words in _special_files(tmp_path):
        with pytest.raises(ConfigError) as exc:
            WebConfig.load(path)
        message = str(exc.value)
        assert words in message and "--web-config-file" in message and "\n" not in message


# -- basic auth -------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _header(user: str | bytes, password: str | bytes) -> str:
    raw = (
        (user if isinstance(user, bytes) else user.encode())
        + b":"
        + (password if isinstance(password, bytes) else password.encode())
    )
    return "Basic " + base64.b64encode(raw).decode()


def _auth(clock: Clock | None = None) -> BasicAuth:
    return BasicAuth({"prometheus": HASH4.encode()}, clock=clock or Clock())


def test_the_right_password_passes_and_is_remembered() -> None:
    auth = _auth()
    assert auth.verify(_header("prometheus", "scrape-pw"), "10.0.0.1") is Verdict.ALLOW
    assert auth.verify(_header("prometheus", "scrape-pw"), "10.0.0.2") is Verdict.ALLOW
    assert auth.verify(_header("prometheus", "scrape-pwx"), "10.0.0.1") is Verdict.DENY
    assert auth.verify(_header("prometheus", "scrape-pw"), "10.0.0.1") is Verdict.ALLOW


@pytest.mark.parametrize(
    "header",
    [
        "",
        "Bearer abc",
        "Basic",
        "Basic !!!not-base64!!!",
        "Basic é",  # not ASCII: base64 refuses it with a ValueError, not a binascii.Error
        "Basic " + base64.b64encode(b"prometheus").decode(),  # no ':'
        "Basic " + base64.b64encode(b"\xff\xfe:\xff").decode(),  # not UTF-8
        _header("prometheus", "x" * 73),  # longer than bcrypt reads
        _header("prometheus", "é" * 40),  # 80 bytes
        _header("prometheus", "a" * 10_000),
        _header("prometheus", "scrape-pw\0"),
        _header("prometheus", ""),
        _header("", "scrape-pw"),
        _header("nobody", "scrape-pw"),
        _header("prometheus" + "\0", "scrape-pw"),
    ],
)
def test_a_malformed_or_wrong_credential_is_denied_never_an_error(header: str) -> None:
    assert _auth().verify(header, "10.0.0.1") is Verdict.DENY


def test_a_guessing_address_is_held_off_with_a_growing_pause_others_are_not() -> None:
    clock = Clock()
    auth = _auth(clock)
    right = _header("prometheus", "scrape-pw")
    for i in range(FAILURES_BEFORE_PENALTY):
        assert auth.verify(_header("prometheus", f"guess-{i}"), "10.0.0.66") is Verdict.DENY
    # Held off: even the right password is not checked now, from that address.
    assert auth.verify(right, "10.0.0.66") is Verdict.DENY
    # Another address is checked as usual.
    assert auth.verify(right, "10.0.0.1") is Verdict.ALLOW
    clock.now += 1.1
    assert auth.verify(_header("prometheus", "guess-x"), "10.0.0.66") is Verdict.DENY
    clock.now += 1.1  # the pause doubled to 2 s
    assert auth.verify(_header("other", "scrape-pw"), "10.0.0.66") is Verdict.DENY
    clock.now += MAX_FAILURE_PENALTY_SECONDS + 0.1
    # A remembered credential is not held off (it needs no check).
    assert auth.verify(right, "10.0.0.66") is Verdict.ALLOW
    clock.now += MAX_FAILURE_PENALTY_SECONDS + 0.1
    assert auth.verify(right, "10.0.0.66") is Verdict.ALLOW


def test_a_success_clears_the_failures_of_an_address() -> None:
    clock = Clock()
    auth = BasicAuth({"a": HASH4.encode(), "b": HASH4.encode()}, clock=clock)
    for i in range(FAILURES_BEFORE_PENALTY - 1):
        assert auth.verify(_header("a", f"guess-{i}"), "10.0.0.1") is Verdict.DENY
    assert auth.verify(_header("b", "scrape-pw"), "10.0.0.1") is Verdict.ALLOW
    for i in range(FAILURES_BEFORE_PENALTY - 1):
        assert auth.verify(_header("a", f"guess-{i}"), "10.0.0.1") is Verdict.DENY
    assert auth.verify(_header("a", "scrape-pw"), "10.0.0.1") is Verdict.ALLOW


# -- /readyz: the class of the reason to anyone, the reason after basic auth ------------------


def _readyz_body(health: Health, authenticated: bool) -> tuple[str, str]:
    app = make_app(
        CollectorRegistry(),
        lambda: (True, ""),
        lambda: health.readyz(connect_timeout=timedelta(seconds=5)),
    )
    environ = {"PATH_INFO": "/readyz", **({AUTHENTICATED: True} if authenticated else {})}
    status: list[str] = []
    body = b"".join(app(environ, lambda s, h: status.append(s)))
    return status[0], body.decode()


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("cannot connect to reaper@db.internal:5432/control: Connection refused", "UNREACHABLE"),
        ("the server is a standby (in recovery): it refuses writes", "READ_ONLY"),
        ("missing tables: routers", "MISSING_TABLES"),
        ("reaper's role lacks DELETE on table routers (see grants.sql)", "MISSING_PRIVILEGES"),
    ],
)
def test_readyz_shows_anyone_the_class_and_an_authenticated_request_the_reason(
    reason: str, kind: str
) -> None:
    health = Health()
    assert _readyz_body(health, False) == (
        "503 Service Unavailable",
        "not ready: no database answer yet\n",
    )
    health.set(False, reason, NotReady[kind])
    status, body = _readyz_body(health, False)
    assert status.startswith("503") and body == f"not ready: {NotReady[kind]}\n"
    assert "db.internal" not in body and "routers" not in body
    assert _readyz_body(health, True)[1] == f"not ready: {reason}\n"
    health.set(True, "")
    assert _readyz_body(health, False) == ("200 OK", "ok\n")


# -- /metrics: one render per burst -------------------------------------------------------------


def test_a_burst_of_scrapes_costs_one_render_and_a_later_scrape_is_fresh() -> None:
    registry = CollectorRegistry()
    counter = Counter("things", "Things counted.", registry=registry)
    clock = Clock()
    renders = SharedRenders(make_wsgi_app(registry), clock=clock)

    def scrape(**headers: str) -> bytes:
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": "/metrics",
            "QUERY_STRING": "",
            **{f"HTTP_{k.upper()}": v for k, v in headers.items()},
        }
        return b"".join(renders(environ, lambda s, h: None))

    assert b"things_total 0.0" in scrape()
    counter.inc()
    assert b"things_total 0.0" in scrape()  # the answer of a moment ago
    assert scrape(accept_encoding="gzip")[:2] == b"\x1f\x8b"  # another kind: its own render
    clock.now += METRICS_REUSE_SECONDS + 0.01
    assert b"things_total 1.0" in scrape()
    for i in range(3 * MAX_METRICS_KINDS):  # kinds of answers a client makes up are bounded
        scrape(accept=f"text/plain; x={i}")
    assert len(renders._answers) == MAX_METRICS_KINDS

"""The web config file's shapes: any malformed one is one line, and ``http_server_config`` is
honoured (its headers) or refused (what the port does not serve)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reaper.daemon.webconfig import ALLOWED_HEADERS, MAX_WEB_CONFIG_DEPTH, WebConfig
from reaper.errors import ConfigError

HASH4 = "$2b$04$Y9X1jOLsCQ/pMA8vfcTzUeSOA2h.WRkecvsnja5ydF6hOK4eJ0.sC"
USERS = f"basic_auth_users:\n  prometheus: '{HASH4}'\n"


def _load(tmp_path: Path, text: str) -> WebConfig:
    config = tmp_path / "web.yml"
    config.write_text(text)
    return WebConfig.load(config)


def _refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, text)
    message = str(exc.value)
    assert "\n" not in message and HASH4 not in message
    return message


DEEP = 20_000


@pytest.mark.parametrize(
    "text",
    [
        "basic_auth_users: " + "[" * DEEP + "]" * DEEP + "\n",
        "basic_auth_users: " + "{a: " * (DEEP // 2) + "b" + "}" * (DEEP // 2) + "\n",
        "".join(f"{' ' * i}k{i}:\n" for i in range(250)) + " " * 250 + "v\n",
        USERS + "http_server_config: " + "[" * DEEP + "]" * DEEP + "\n",
        "- " * 5_000 + "x\n",
        # One level past the limit: still refused, in the same words.
        USERS + "x: " + "[" * MAX_WEB_CONFIG_DEPTH + "]" * MAX_WEB_CONFIG_DEPTH + "\n",
    ],
    ids=["lists", "mappings", "block", "http_server_config", "block-list", "just-past"],
)
def test_a_deep_web_config_is_one_line(tmp_path: Path, text: str) -> None:
    """A 20,000-deep YAML once raised RecursionError: a traceback at start."""
    assert "nests more than" in _refused(tmp_path, text)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (USERS + "x: !!python/object:os.system {}\n", "not valid YAML"),
        (USERS + "? [a, b]\n: c\n", "not valid YAML"),
        ("basic_auth_users: &a [*a]\n", "basic_auth_users"),
        ("basic_auth_users: {? {a: b} : c}\n", "not valid YAML"),
        (f"basic_auth_users: {{[a]: '{HASH4}'}}\n", "not valid YAML"),
        (f"basic_auth_users: {{null: '{HASH4}'}}\n", "user name"),
        ("basic_auth_users: {a: &h x, b: *h}\n", "bcrypt"),
        ("basic_auth_users: 'x'\n", "basic_auth_users"),
        ("--- 1\n--- 2\n", "not valid YAML"),
        ("\t- a\n", "not valid YAML"),
        ("'\n", "not valid YAML"),
        ("7\n", "mapping"),
    ],
)
def test_a_malformed_web_config_is_one_line(tmp_path: Path, text: str, words: str) -> None:
    assert words in _refused(tmp_path, text)


def test_the_headers_of_http_server_config_are_read(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        USERS
        + "http_server_config:\n  http2: false\n  headers:\n"
        + "    X-Frame-Options: deny\n    Content-Security-Policy: \"default-src 'none'\"\n",
    )
    assert config.headers == (
        ("X-Frame-Options", "deny"),
        ("Content-Security-Policy", "default-src 'none'"),
    )
    assert _load(tmp_path, USERS + "http_server_config: {}\n").headers == ()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("http_server_config:\n  http2: true\n", "http2 is not served"),
        ("http_server_config:\n  http2: yes\n", "http2 is not served"),
        ("http_server_config:\n  headers:\n    Server: reaper\n", "cannot be set"),
        ("http_server_config:\n  headers:\n    x-frame-options: deny\n", "cannot be set"),
        ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", "deny or sameorigin"),
        ("http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n", "nosniff"),
        ('http_server_config:\n  headers:\n    X-XSS-Protection: "1\\r\\nX: y"\n', "one line"),
        ("http_server_config:\n  headers:\n    X-XSS-Protection: 1\n", "one line"),
        ("http_server_config:\n  headers: [a]\n", "map names"),
        ("http_server_config:\n  timeout: 5\n", "unknown key"),
        ("http_server_config: [a]\n", "must be a mapping"),
        ("rate_limit:\n  burst: 5\n  interval: 1s\n", "rate_limit is not served"),
    ],
)
def test_what_the_port_does_not_honour_is_refused(tmp_path: Path, text: str, words: str) -> None:
    """http_server_config was accepted and silently ignored: a header was never sent."""
    assert words in _refused(tmp_path, USERS + text)


def test_every_header_exporter_toolkit_allows_is_allowed(tmp_path: Path) -> None:
    values = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "sameorigin"}
    lines = "".join(f"    {name}: '{values.get(name, 'x')}'\n" for name in ALLOWED_HEADERS)
    config = _load(tmp_path, USERS + "http_server_config:\n  headers:\n" + lines)
    assert [name for name, _ in config.headers] == list(ALLOWED_HEADERS)

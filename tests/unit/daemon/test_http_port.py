"""The HTTP port under abuse: slow clients, oversized headers, more connections than the limit.

The invariant: no client of the port can crash or starve the daemon. Any number of slow or
oversized clients leaves its memory within a few MiB of what it was, and ``/metrics`` answers
a well-behaved scraper throughout. Tried against the real ``reaper run`` process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reaper.errors import ConfigError
from tests.support.daemon import kill_leftovers
from tests.support.http_port import _server


@pytest.fixture(autouse=True)
def _no_process_left() -> Iterator[None]:
    yield
    kill_leftovers()




@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n", ["tls_server_config"]),
        ("basic_auth_users:\n  prometheus: plain-password\n", ["bcrypt"]),
        ("basic_auth_users: [a, b]\n", ["basic_auth_users"]),
        ("users: {}\n", ["unknown key"]),
        ("basic_auth_users: {a: [\n", ["not valid YAML"]),
        ("- a\n", ["mapping"]),
    ],
)
def test_a_bad_web_config_file_is_one_line(tmp_path: Path, text: str, words: list[str]) -> None:
    config = tmp_path / "web.yml"
    config.write_text(text)
    with pytest.raises(ConfigError) as exc:
        _server(config)
    message = str(exc.value)
    assert "\n" not in message and "--web-config-file" in message
    for w in words:
        assert w in message


def test_a_missing_web_config_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        _server(tmp_path / "nope.yml")



"""The web config file of the HTTP port, in the format of Prometheus exporters' exporter-toolkit.

reaper honours ``basic_auth_users`` and ``http_server_config.headers``. It refuses, in one
line, what it does not serve: TLS, HTTP/2, rate limits, and any other key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reaper.config.files import read_regular_file
from reaper.errors import ConfigError

# A web config file is a few lines; past this it is the wrong file.
MAX_WEB_CONFIG_BYTES = 64 * 1024
# Mappings and lists inside one another at most. The deepest valid file has 3
# (http_server_config, headers, a value).
MAX_WEB_CONFIG_DEPTH = 8
# bcrypt's cost factor at most: each step doubles a check's time. Cost 12 takes ~0.35 s on
# one core here, so a scraper's first answer (its password not yet verified) comes within a
# second; a cost-31 hash would hold the check for days.
MAX_BCRYPT_COST = 12
_BCRYPT_HASH = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
_MAKE_HASH = "make one with: htpasswd -nBC 10 '' | tr -d ':\\n'"
# The headers exporter-toolkit lets http_server_config.headers set, with their allowed
# values (None: any value).
ALLOWED_HEADERS: Mapping[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}
# A header value: visible ASCII and spaces (no line break can end the header early).
_HEADER_VALUE = re.compile(r"[\x20-\x7e]*")
_KNOWN_KEYS = ("basic_auth_users", "http_server_config")


@dataclass(frozen=True)
class WebConfig:
    """A web config file's settings.

    Attributes:
        basic_auth_users: name -> bcrypt hash, never empty.
        headers: (name, value) sent with every answer (``http_server_config.headers``).
    """

    basic_auth_users: Mapping[str, bytes] = field(default_factory=dict)
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def load(cls, path: Path) -> WebConfig:
        """Read and check a web config file (YAML).

        It must be a regular file of at most :data:`MAX_WEB_CONFIG_BYTES`, nested at most
        :data:`MAX_WEB_CONFIG_DEPTH` deep, naming at least one user whose bcrypt hash costs
        at most :data:`MAX_BCRYPT_COST`.

        Raises:
            ConfigError: one line naming what is wrong and the fix.
        """
        where = f"--web-config-file {path}"
        data = read_regular_file(
            path,
            name=where,
            expect="give it a YAML file with basic_auth_users",
            limit_bytes=MAX_WEB_CONFIG_BYTES,
        )
        doc = _parse(data, where)
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            raise ConfigError(f"{where}: expected a mapping with basic_auth_users")
        _refuse_unserved(doc, where)
        return cls(_users(doc.get("basic_auth_users"), where), _headers(doc, where))


def _parse(data: bytes, where: str) -> Any:
    """The YAML document of ``data``, nested at most :data:`MAX_WEB_CONFIG_DEPTH` deep."""
    import yaml

    def invalid(exc: Exception) -> ConfigError:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ConfigError(f"{where} is not valid YAML: {first}")

    try:
        text = data.decode("utf-8")
        if not text.strip():
            return None
        # The event stream is read without recursion; building the document recurses once
        # per level, so the depth is checked on the events first.
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_WEB_CONFIG_DEPTH:
                    raise ConfigError(
                        f"{where} nests more than {MAX_WEB_CONFIG_DEPTH} levels deep; a web "
                        "config needs 3 at most"
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return yaml.safe_load(text)
    except UnicodeDecodeError as exc:
        raise invalid(exc) from None
    except yaml.YAMLError as exc:
        raise invalid(exc) from None


def _refuse_unserved(doc: dict[Any, Any], where: str) -> None:
    unknown = set(doc) - {*_KNOWN_KEYS, "tls_server_config", "rate_limit"}
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; known: "
            f"{', '.join(_KNOWN_KEYS)}"
        )
    if doc.get("tls_server_config"):
        raise ConfigError(
            f"{where}: tls_server_config is not served by reaper's port; remove it and "
            "terminate TLS in front of the port (a sidecar, the service mesh)"
        )
    if doc.get("rate_limit"):
        raise ConfigError(
            f"{where}: rate_limit is not served by reaper's port (it bounds each client's "
            "cost itself); remove it"
        )


def _users(users: Any, where: str) -> dict[str, bytes]:
    if users is not None and not isinstance(users, dict):
        raise ConfigError(f"{where}: basic_auth_users must map user names to bcrypt hashes")
    if not users:
        # Without users the port would be open: a file given to guard it must guard it.
        raise ConfigError(
            f"{where}: basic_auth_users names no user, so nothing would be guarded; add "
            f"one (name: bcrypt hash; {_MAKE_HASH}) or leave --web-config-file out"
        )
    out: dict[str, bytes] = {}
    for name, hashed in users.items():
        shown = repr(str(name)[:40]) if isinstance(name, str | int | float) else "?"
        if not isinstance(name, str) or not name or ":" in name:
            raise ConfigError(
                f"{where}: basic_auth_users: the user name {shown} cannot be sent in basic "
                "auth; use a non-empty name without ':'"
            )
        match = _BCRYPT_HASH.fullmatch(hashed) if isinstance(hashed, str) else None
        if match is None:
            raise ConfigError(
                f"{where}: basic_auth_users: the value for {shown} is not a bcrypt hash; "
                f"{_MAKE_HASH}"
            )
        cost = int(match.group(1))
        if not 4 <= cost <= MAX_BCRYPT_COST:
            raise ConfigError(
                f"{where}: basic_auth_users: the hash for {shown} has cost {cost}; reaper "
                f"takes 4 to {MAX_BCRYPT_COST} (each step doubles the time of a check); "
                f"{_MAKE_HASH}"
            )
        out[name] = hashed.encode()
    return out


def _headers(doc: dict[Any, Any], where: str) -> tuple[tuple[str, str], ...]:
    """``http_server_config.headers`` as (name, value) pairs, as exporter-toolkit checks them."""
    config = doc.get("http_server_config")
    if config is None:
        return ()
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: http_server_config must be a mapping (headers, http2)")
    unknown = set(config) - {"headers", "http2"}
    if unknown:
        raise ConfigError(
            f"{where}: http_server_config: unknown key(s) "
            f"{', '.join(sorted(map(str, unknown)))}; known: headers, http2"
        )
    if config.get("http2") not in (None, False):
        raise ConfigError(
            f"{where}: http_server_config: http2 is not served by reaper's port (HTTP/1.1 "
            "only); remove it or set it to false"
        )
    headers = config.get("headers")
    if headers is None:
        return ()
    if not isinstance(headers, dict):
        raise ConfigError(f"{where}: http_server_config: headers must map names to values")
    out = []
    for name, value in headers.items():
        if name not in ALLOWED_HEADERS:
            raise ConfigError(
                f"{where}: http_server_config: the header {str(name)[:40]!r} cannot be set; "
                f"these can: {', '.join(ALLOWED_HEADERS)}"
            )
        allowed = ALLOWED_HEADERS[name]
        if not isinstance(value, str) or not _HEADER_VALUE.fullmatch(value):
            raise ConfigError(
                f"{where}: http_server_config: the value of {name} must be text on one line"
            )
        if allowed is not None and value not in allowed:
            raise ConfigError(
                f"{where}: http_server_config: {name} takes {' or '.join(allowed)}, not "
                f"{value[:40]!r}"
            )
        out.append((name, value))
    return tuple(out)

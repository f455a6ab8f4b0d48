"""The connection string, read once and never shown.

reaper never echoes a DSN it was given: a password may hide in it in any shape (a URI's
``user:...@``, ``password=...``, a service file's name next to it), so no message, log event
or HTTP answer quotes its text, not even to say that it is wrong. Messages name the target from
the parsed parameters (:func:`describe_target`: user, host, port, database), and a DSN that
does not parse, or that parses into something else than it seems to say, is described by
:func:`parse_dsn` without its text. Every message path that names a database goes through
these two functions.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from reaper import errors

# libpq's complaints about a connection string (fe-connect.c), by their first words, as reaper
# says them: libpq's own message quotes the offending text, which may be the password.
_PARSE_REASONS = (
    (
        'missing "=" after',
        "a word without \"=\" (a value with a space must be quoted: password='two words')",
    ),
    ("unterminated quoted string", "a quoted value is not closed"),
    ("invalid connection option", "a parameter name that libpq does not know"),
    ("invalid percent-encoded token", "an invalid percent-encoding (write % itself as %25)"),
    ("forbidden value %00", "a percent-encoded NUL (%00)"),
    ("unexpected spaces found", "a space in a URI (write it as %20)"),
    ("unexpected character", "an unexpected character in the URI's host part"),
    ("extra key/value separator", "an invalid query parameter in the URI"),
    ("missing key/value separator", "an invalid query parameter in the URI"),
    ("invalid URI query parameter", "an unknown query parameter in the URI"),
    ("IPv6 host address", "an invalid IPv6 host address in the URI"),
    ("end of string reached when looking for matching", "an invalid IPv6 host address in the URI"),
    ("invalid URI", "an invalid URI"),
)

_URI_PREFIXES = ("postgresql://", "postgres://")

AMBIGUOUS_URI = (
    "a URI that holds '@' after its host or its credentials: a password with an unencoded "
    "'/' or '@' makes libpq read part of it as the host, port or database; percent-encode "
    "them ('/' as %2F, '@' as %40, '%' as %25), or give the password by a password file or a "
    "service file"
)


# Parameters whose value libpq checks only when it connects (a failed connection, exit 1, and
# a message that may quote the value): checked here instead, as a DSN that does not parse.
_CHOICES = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "gssencmode": ("disable", "prefer", "require"),
    "channel_binding": ("disable", "prefer", "require"),
    "target_session_attrs": (
        "any",
        "read-write",
        "read-only",
        "primary",
        "standby",
        "prefer-standby",
    ),
}
_URI_HINT = "; in a URI the port follows the host's ':', and user:password goes before the '@'"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def _scheme_mistake(text: str) -> str | None:
    """Why ``text``, which looks like a URI, is not one libpq reads as such (None: it is one,
    or it does not look like a URI). Without a valid scheme libpq reads a URI as keyword=value
    pairs and complains about a word without "=", which says nothing of the real mistake."""
    stripped = text.strip()
    lowered = stripped.lower()
    if stripped.startswith(_URI_PREFIXES):
        return None
    if lowered.startswith(("jdbc:postgresql://", "jdbc:postgres://")):
        return "a JDBC URL: remove its 'jdbc:' prefix (postgresql://...)"
    if lowered.startswith(_URI_PREFIXES):
        return "a URI whose scheme is not in lower case: write postgresql://"
    if re.match(r"(postgres|postgresql)(:/?(?!/)|//)", lowered):
        return "a URI that does not begin with postgresql:// (a colon, then two slashes)"
    if _SCHEME.match(stripped):
        return "a URI whose scheme is not postgresql:// or postgres:// (misspelt?)"
    return None


def _value_mistake(params: Mapping[str, Any], uri: bool) -> str | None:
    """Why a parsed parameter's value cannot work (None: each can), never quoting the value:
    in a URI with a misplaced ':' the "port" is a password."""
    for port in str(params.get("port") or "").split(","):
        port = port.strip()
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            return "the port is not a number from 1 to 65535" + (_URI_HINT if uri else "")
    for address in str(params.get("hostaddr") or "").split(","):
        try:
            if address.strip():
                ipaddress.ip_address(address.strip())
        except ValueError:
            return "hostaddr is not an IP address (a host name goes in host)"
    for name, choices in _CHOICES.items():
        if name in params and str(params[name]) not in choices:
            return f"{name} is none of {', '.join(choices)}"
    return None


def dsn_parse_error(label: str, reason: str) -> errors.ConfigError:
    """The one message for a DSN that reaper cannot use: it names where the DSN came from
    (``label``) and why, never its text."""
    return errors.ConfigError(f"{label}: the DSN (not shown) does not parse: {reason}")


def _reason(message: str) -> str:
    for words, reason in _PARSE_REASONS:
        if message.startswith(words) or words in message.split('"', 1)[0]:
            return reason
    return "libpq cannot read it as a connection string or URI"


def _ambiguous_uri(dsn: str) -> bool:
    """True for a URI in which libpq would take part of a password for something else: an
    '@' outside the credentials and the query (libpq ends the credentials at the first '@'
    and the host at the first '/')."""
    lowered = dsn[:16].lower()
    prefix = next((p for p in _URI_PREFIXES if lowered.startswith(p)), None)
    if prefix is None:
        return False
    rest = dsn[len(prefix) :]
    at, slash = rest.find("@"), rest.find("/")
    if at != -1 and (slash == -1 or at < slash):
        rest = rest[at + 1 :]
    return "@" in rest.split("?", 1)[0]


def parse_dsn(dsn: str | None, label: str = "--dsn") -> dict[str, Any]:
    """The libpq parameters of ``dsn`` (an empty one: libpq's defaults, ``{}``; a blank one
    given by the user is refused earlier, by :func:`reaper.config.values.dsn_text`).

    Raises:
        ConfigError: it does not parse, is a URI that libpq
            would read otherwise than it seems to say, or names a port, an address or a mode
            that no connection can use; the message names ``label``, never the DSN's text.
    """
    text = dsn or ""
    if mistake := _scheme_mistake(text):
        raise dsn_parse_error(label, mistake)
    try:
        params = conninfo_to_dict(text)
    except psycopg.ProgrammingError as exc:
        raise dsn_parse_error(label, _reason(str(exc).strip())) from None
    if _ambiguous_uri(text):
        raise dsn_parse_error(label, AMBIGUOUS_URI)
    if mistake := _value_mistake(params, text.lstrip().startswith(_URI_PREFIXES)):
        raise dsn_parse_error(label, mistake)
    return params


def describe_target(params: Mapping[str, Any]) -> str:
    """``user@host:port/dbname`` of parsed connection parameters (:func:`parse_dsn`), never a
    password; what libpq chooses by itself (its PG* variables, a service file) is shown as
    such."""
    if params.get("service") and not (params.get("host") or params.get("hostaddr")):
        host = f"service {params['service']}"
    else:
        host = str(params.get("host") or params.get("hostaddr") or "(libpq default host)")
    port = params.get("port") or ""
    user = params.get("user") or ""
    db = params.get("dbname") or ""
    return f"{f'{user}@' if user else ''}{host}{f':{port}' if port else ''}/{db}"


def describe_dsn(dsn: str | None) -> str:
    """A DSN as a message may name it: its target (:func:`describe_target`), or ``a DSN (not
    shown) that does not parse``."""
    try:
        return describe_target(parse_dsn(dsn))
    except errors.ConfigError:
        return "a DSN (not shown) that does not parse"

"""The value grammar of every setting: durations, counts, fractions, names, zones.

Each parser takes a raw value (a flag's text, an environment variable, a TOML value) and
returns the typed value or raises ValueError with the fix; :func:`scalar` puts the checks
every scalar setting shares in front of a parser, so that each kind of wrong value is
refused at one place whatever its source.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from reaper.vocab import PartitionAction, Strategy

# A [sweeps.NAME] window of "any": that sweep runs at any time, whatever the global window.
ANY_TIME = "any"

STRATEGIES = tuple(Strategy)
# What a sweep does with a partition wholly past its cutoff (reaper.engine.partitions): drop it,
# detach it only (kept as a table of its own, for an archive job), or leave it to the row
# batches.
PARTITION_ACTIONS = tuple(PartitionAction)

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_DURATION_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
}
# Said in every refusal of a unit: the units are case-sensitive and each is an exact length.
ACCEPTED_UNITS = "ms (milliseconds), s, m (minutes), h, d (24 h), w (7 d)"
# Units a user may mean that reaper refuses, and why (a month or a year has no fixed length;
# "M" reads as month in some tools and minute in others).
_REFUSED_UNITS = {
    "M": "ambiguous (month or minute?)",
    "mo": "a month has no fixed length",
    "y": "a year has no fixed length",
    "Y": "a year has no fixed length",
}
_NUMBER_THEN_UNIT = re.compile(r"(\d+(?:\.\d+)?)([^\d.]*)")


def parse_duration(text: str | int | float | timedelta) -> timedelta:
    """Parse a duration such as ``30d``, ``72h``, ``90m``, ``45s``, ``500ms`` or ``1h30m``.

    Units (case-sensitive, each an exact length): ms, s, m (minutes), h, d (24 hours),
    w (7 days). ``M`` (month or minute?), months, years, upper-case units (``3H``, ``3D``)
    and anything else are refused, naming the accepted units. A bare number other than 0 is
    refused: ``session_retention = 72`` meant as hours would silently be 72 seconds, and
    delete almost every session.

    Raises:
        ValueError: the text is not a duration, has no unit, or has a unit not accepted.
    """
    if isinstance(text, timedelta):
        return text
    if isinstance(text, bool):
        raise ValueError(f"{shown(text)} is not a duration")
    if isinstance(text, int | float):
        text = str(text)
    try:
        return _parse_duration_text(text)
    except OverflowError:
        raise ValueError(f"{text!r} is too long a duration") from None


def _unit_error(text: str, unit: str) -> ValueError:
    why = _REFUSED_UNITS.get(unit)
    if why is None and unit.lower() in _DURATION_UNITS:
        why = f"units are case-sensitive (did you mean {unit.lower()}?)"
    return ValueError(
        f"{text!r} is not a duration: unit {unit!r}: {why or 'unknown unit'}; "
        f"accepted units: {ACCEPTED_UNITS} (e.g. 30d, 72h, 90m)"
    )


def _parse_duration_text(text: str) -> timedelta:
    s = text.strip()
    sign = -1 if s.startswith("-") else 1
    # One sign at most: "--1h" or "+-1h" is a typo, not a duration.
    s = s[1:] if s.startswith(("+", "-")) else s
    if re.fullmatch(r"\d+(\.\d+)?", s):
        if float(s) == 0:
            return timedelta(0)  # zero is zero in any unit
        raise ValueError(
            f"{text!r} has no unit: a duration needs one (e.g. {s}s, {s}m, {s}h or {s}d); "
            f"accepted units: {ACCEPTED_UNITS}"
        )
    # Name the offending unit when a number is followed by something not accepted.
    for m in _NUMBER_THEN_UNIT.finditer(s):
        unit = m.group(2).strip()
        if unit and unit not in _DURATION_UNITS and not _DURATION_PART.fullmatch("1" + unit):
            # "1h30m" splits as ("1", "h"), ("30", "m"); a bad unit stands alone.
            raise _unit_error(text, unit)
    pos, total = 0, timedelta()
    for m in _DURATION_PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if not s or pos != len(s):
        raise ValueError(
            f"{text!r} is not a duration (use e.g. 30d, 72h, 90m, 45s, 500ms); "
            f"accepted units: {ACCEPTED_UNITS}"
        )
    return sign * total


def format_duration(d: timedelta) -> str:
    """Format a duration the way :func:`parse_duration` reads it (``30d``, ``1h30m``, ``45s``)."""
    ms = round(d.total_seconds() * 1000)
    if ms == 0:
        return "0s"
    out, sign = [], "-" if ms < 0 else ""
    ms = abs(ms)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        n, ms = divmod(ms, size)
        if n:
            out.append(f"{n}{unit}")
    if ms:
        out.append(f"{ms}ms")
    return sign + "".join(out)


# Past this a duration is a typo (and a cutoff that far back overflows PostgreSQL's dates).
MAX_DURATION = timedelta(days=36_500)
# Past this a count is a typo (a batch of more rows than PostgreSQL's bigint LIMIT takes).
MAX_COUNT = 1_000_000_000


def positive_duration(value: Any) -> timedelta:
    d = parse_duration(value)
    if d <= timedelta(0):
        raise ValueError(f"must be positive, got {format_duration(d)}")
    if d > MAX_DURATION:
        raise ValueError(f"{value!r} is longer than 100 years; is it a typo?")
    return d


def positive_int(value: Any) -> int:
    n = whole_number(value)
    if n <= 0:
        raise ValueError(f"must be a positive whole number, got {n}")
    if n > MAX_COUNT:
        raise ValueError(f"{n} is more than {MAX_COUNT:,}; is it a typo?")
    return n


def optional_positive_int(value: Any) -> int | None:
    return None if value in (None, "", 0, "0") else positive_int(value)


def optional_positive_duration(value: Any) -> timedelta | None:
    return None if value in (None, "", 0, "0") else positive_duration(value)


# PostgreSQL keeps a time setting in milliseconds as an int (INT_MAX): a longer
# statement_timeout is refused by the server, when reaper opens a session.
SERVER_MAX_DURATION = timedelta(milliseconds=2**31 - 1)
# libpq reads connect_timeout as an int of seconds.
CLIENT_MAX_DURATION = timedelta(seconds=2**31 - 1)


class BoundedDuration:
    """The value type of a positive duration that ends up in a setting of ``whose``, which
    holds at most ``maximum``: a longer one is refused at load, not when the server or libpq
    gets it."""

    def __init__(self, maximum: timedelta, whose: str) -> None:
        self.maximum = maximum
        self.whose = whose
        self.__doc__ = f"A positive duration of at most {format_duration(maximum)} ({whose})."

    def __call__(self, value: Any) -> timedelta:
        d = positive_duration(value)
        if d > self.maximum:
            raise ValueError(f"{format_duration(d)} is more than {self.whose} holds")
        return d

    @property
    def expected(self) -> str:
        """What a value looks like, for the fix of an error message."""
        return (
            f"a duration with a unit of at most {format_duration(self.maximum)}, e.g. "
            '"10s", "5m" or "500ms"'
        )


# A duration that reaper sets as a PostgreSQL setting (statement_timeout, lock_timeout, ...).
server_duration = BoundedDuration(SERVER_MAX_DURATION, "a PostgreSQL time setting")
# A duration that reaper hands libpq in whole seconds (connect_timeout).
client_seconds = BoundedDuration(CLIENT_MAX_DURATION, "libpq's connect_timeout")


# A number, then a unit or none (whole bytes), then "/s" or nothing; the unit is checked apart,
# so that one reaper does not take ("TB") is named.
_BYTE_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)\s*(?:/s)?", re.IGNORECASE)
_BYTE_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}
# Said in the fix of every refused byte rate (units are read in any case).
ACCEPTED_BYTE_UNITS = "B, kB, MB, GB (powers of 1000), KiB, MiB, GiB (powers of 1024)"
# Past this a byte rate is a typo: no server writes WAL that fast.
MAX_BYTE_RATE = 1024**4


def optional_byte_rate(value: Any) -> int | None:
    """Bytes per second from a whole number of bytes, or a number (fractions allowed) with a
    unit of :data:`ACCEPTED_BYTE_UNITS` and an optional ``/s`` (``16000000``, ``16MB``,
    ``1.5MiB``, ``16MB/s``); rounded down to whole bytes. Zero in any unit: None (off).

    Raises:
        ValueError: not a number, a fraction of a byte, a unit not accepted, or less than
            one byte or more than :data:`MAX_BYTE_RATE` a second.
    """
    if value in (None, ""):
        return None
    if isinstance(value, bool):
        raise ValueError(f"{shown(value)} is not a number of bytes per second")
    text = str(value).strip()
    m = _BYTE_RATE.fullmatch(text.removeprefix("-"))
    if m is None:
        raise ValueError(f"{shown(value)} is not a number of bytes per second")
    number, unit = Decimal(m.group(1)), m.group(2).lower() or "b"
    if unit not in _BYTE_UNITS:
        raise ValueError(f"{shown(value)}: unit {m.group(2)!r} is not accepted")
    rate = number * _BYTE_UNITS[unit]
    if rate == 0:
        return None  # zero is off in any unit
    if text.startswith("-"):
        raise ValueError(f"{shown(value)} is negative")
    if _BYTE_UNITS[unit] == 1 and rate != rate.to_integral_value():
        raise ValueError(f"{shown(value)} is not a whole number of bytes")
    if rate < 1:
        raise ValueError(f"{shown(value)} is less than one byte per second")
    if rate > MAX_BYTE_RATE:
        raise ValueError(f"{shown(value)} is more than 1 TiB (1024GiB) a second; is it a typo?")
    return int(rate)


# A sweep interval this short is a typo (1ms for 1m): it would keep every sweep running back to
# back. The tests run sweeps every 200-300 ms.
MIN_INTERVAL = timedelta(milliseconds=100)


def optional_interval(value: Any) -> timedelta | None:
    d = optional_positive_duration(value)
    if d is not None and d < MIN_INTERVAL:
        raise ValueError(f"an interval of {format_duration(d)} is under 100ms; is it a typo?")
    return d


def whole_number(value: Any) -> int:
    """A whole number from a TOML integer or a string of digits: never a float (2.7 is not
    silently 2), a boolean, or more digits than any count needs."""
    text = str(value).strip()
    if isinstance(value, bool | float) or not re.fullmatch(r"[+-]?\d{1,30}", text):
        raise ValueError(f"{shown(value)} is not a whole number")
    return int(text)


def non_negative_int(value: Any) -> int:
    n = whole_number(value)
    if n < 0:
        raise ValueError(f"must be 0 or more, got {n}")
    if n > MAX_COUNT:
        raise ValueError(f"{n} is more than {MAX_COUNT:,}; is it a typo?")
    return n


def fraction(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{shown(value)} is not a number")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{shown(value)} is not a number") from None
    if not 0.0 <= f <= 1.0:  # NaN fails this too
        raise ValueError(f"must be between 0 and 1, got {shown(value)}")
    return f


def share(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{shown(value)} is not a number")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{shown(value)} is not a number") from None
    if not 0.0 < f <= 1.0:  # NaN fails this too
        raise ValueError(f"must be more than 0 and at most 1, got {shown(value)}")
    return f


# Wall times without a time zone (timestamp, date columns) are read as UTC unless the
# application writes them in another zone (timestamp_time_zone names it).


def time_zone(value: Any) -> str:
    """An IANA time zone name that both Python and PostgreSQL know (PostgreSQL ships the
    same tz database; the session refuses an unknown name at connect)."""
    import zoneinfo

    text = str(value).strip()
    if text.upper() == "UTC":
        return "UTC"
    try:
        if text in zoneinfo.available_timezones():
            zoneinfo.ZoneInfo(text)
            return text
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        pass
    raise ValueError(
        f"{text!r} is not an IANA time zone name (e.g. UTC, Europe/Berlin, Asia/Seoul, "
        "America/New_York); fixed offsets such as +09 are refused because their sign means "
        "the opposite in POSIX and ISO"
    )


def strategy_name(value: Any) -> Strategy:
    if value not in STRATEGIES:
        raise ValueError(f"must be one of {', '.join(STRATEGIES)}, got {shown(value)}")
    return Strategy(value)


def partition_action_name(value: Any) -> PartitionAction:
    if value not in PARTITION_ACTIONS:
        raise ValueError(f"must be one of {', '.join(PARTITION_ACTIONS)}, got {value!r}")
    return PartitionAction(value)


def optional_str(value: Any) -> str | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ValueError(f"{shown(value)} is not a string")
    return value


def dsn_text(value: Any) -> str | None:
    """A DSN as given (None: unset, and libpq's PG* variables and service file choose). A blank
    one is refused rather than read as unset: it was meant to be set and came out empty (an
    unset shell variable, an empty key of a Secret). Never quoted back: it may hold a password.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("is not a string")
    if not value.strip():
        raise ValueError("is empty (leave it unset to let libpq's PG* variables choose)")
    return value


def listen_address(value: Any) -> str:
    """``HOST:PORT``, ``:PORT`` (every interface) or ``[IPv6]:PORT``; returned as given."""
    if not isinstance(value, str):
        raise ValueError(f"{shown(value)} is not a string")
    text = value.strip()
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. :9465, 127.0.0.1:9465, [::]:9465)")
    if not 0 <= int(port) < 65536:
        raise ValueError(f"{text!r}: port {int(port)} is out of range (0 to 65535)")
    if host.startswith("[") != host.endswith("]"):
        raise ValueError(f"{text!r}: an IPv6 address goes in brackets, e.g. [::1]:9465")
    return text


def split_listen(listen: str) -> tuple[str, int]:
    """``(host, port)`` of a ``--listen`` value; host "" means every interface."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{shown(value)} is not a boolean (use true or false)")


# What a setting of each kind (its metavar) takes: the fix named in its error message.
EXPECTED = {
    "ROWS": "a whole number of rows, e.g. 10000",
    "DURATION": 'a duration with a unit, e.g. "30d", "72h", "90s" or "500ms"',
    "FRACTION": "a number from 0 to 1, e.g. 0.1",
    "SHARE": "a number more than 0 and at most 1, e.g. 0.5",
    "CONNECTIONS": "a whole number of connections from 1 to 16, e.g. 2",
    "BYTES": "bytes per second: a whole number, or a number and one of the units "
    f'{ACCEPTED_BYTE_UNITS} in quotes, e.g. "16MB" or "1.5MiB"; or 0 (off)',
    "SCHEMA": 'a schema name as PostgreSQL spells it, in quotes, e.g. "controlplane"',
    "DSN": 'a libpq connection string in quotes, e.g. "host=db.internal dbname=app"',
    "HOST:PORT": 'an address in quotes, e.g. "127.0.0.1:9465"',
    "FILE": 'a file path in quotes, e.g. "/etc/reaper/web.yml"',
    "ZONE": 'an IANA time zone name in quotes, e.g. "UTC" or "Asia/Seoul"',
    "CRON": 'a cron expression in quotes, e.g. "0 3 * * *" or "*/15 * * * mon-fri"',
    "WINDOW": 'a window HH:MM-HH:MM in quotes, e.g. "01:00-05:00", or "any"',
    "auto|heap|index": 'one of "auto", "heap" or "index"',
    "drop|detach|off": 'one of "drop", "detach" or "off"',
    None: "true or false",
}
# Longest raw value quoted back in an error message (the line stays one readable line).
_SHOWN_CHARS = 40


def shown(value: Any) -> str:
    """``value`` as an error message quotes it: repr (control characters escaped, so the
    message stays one line), cut at :data:`_SHOWN_CHARS`; a boolean as TOML spells it
    (``true``, not Python's ``True``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _toml_kind(value: Any) -> str | None:
    """The name of a TOML value kind that no scalar setting takes (None: a scalar)."""
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, datetime):
        return "date-time"
    if isinstance(value, date):
        return "date"
    if isinstance(value, time):
        return "time"
    if not isinstance(value, str | int | float | timedelta):
        return type(value).__name__
    return None


def check_text(value: str, *, multiline: bool = False) -> None:
    """Refuse text no setting takes: bytes that were not UTF-8 (decoded by Python as lone
    surrogates, from argv or the environment) and control characters (newlines only where
    ``multiline``: a predicate).

    Raises:
        ValueError: which character, and where.
    """
    allowed = "\t\n\r" if multiline else ""
    for i, ch in enumerate(value):
        if "\ud800" <= ch <= "\udfff":
            raise ValueError(f"is not UTF-8 text (byte {i}); give it in UTF-8")
        if (ch < " " or "\x7f" <= ch <= "\x9f") and ch not in allowed:
            raise ValueError(f"has a control character {ch!r} at {i}; remove it")


def scalar(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``parse`` behind the checks every scalar setting shares, whatever its source: no TOML
    table, array, date or time; no NaN or infinity; no undecodable bytes or control
    characters in text. The one chokepoint every setting's parser passes through."""

    def checked(value: Any) -> Any:
        kind = _toml_kind(value)
        if kind is not None:
            raise ValueError(f"got a TOML {kind}, which this setting does not take")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        if isinstance(value, str):
            check_text(value)
        return parse(value)

    checked.__doc__ = parse.__doc__
    return checked


def did_you_mean(key: str, known: Iterable[str]) -> str | None:
    """``; did you mean 'x'?`` for the known name closest to a mistyped ``key`` (None when
    none is close), as click does for flags."""
    close = difflib.get_close_matches(key.replace("-", "_"), list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else None


def keyed(key: str, parse: Callable[[Any], Any], value: Any) -> Any:
    try:
        return parse(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"{key}: {exc}") from None


def nonempty_text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    check_text(value, multiline=True)
    return value.strip()


def one_line(value: Any) -> str:
    """A table name or a metric label: one line of text."""
    text = nonempty_text(value)
    check_text(text)
    return text


def archive_file(value: Any) -> str:
    """Where a sweep writes its deleted rows as JSON lines: an absolute path, or ``-`` for
    standard output (a daemon's working directory is not one to rely on)."""
    text = one_line(value)
    if text != "-" and not text.startswith("/"):
        raise ValueError(
            f"{shown(text)} is not an absolute path; give one (e.g. "
            '"/var/lib/reaper/archive.jsonl"), or "-" for standard output'
        )
    return text


def identifier(value: Any) -> str:
    """A column, table or schema name, exactly as PostgreSQL names it (case kept): one line
    of text, no NUL, at most 63 bytes (NAMEDATALEN - 1)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{shown(value)} is not a name; give a string")
    check_text(value)
    if len(value.encode("utf-8")) > 63:
        raise ValueError(f"{shown(value)} is longer than 63 bytes, PostgreSQL's limit for a name")
    return value


def schema_name(value: Any) -> str:
    """A schema of tables reaper may sweep: a name (:func:`identifier`), never one of the
    system catalog's (``pg_catalog``, ``information_schema``, ``pg_*``)."""
    from reaper.sqltext.declared import is_catalog_schema

    name = identifier(value)
    if is_catalog_schema(name):
        raise ValueError(f"{name} is a schema of the system catalog; reaper never sweeps one")
    return name

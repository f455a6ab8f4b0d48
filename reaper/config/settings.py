"""Settings: one frozen object, built once from flags > REAPER_* env > TOML file > defaults.

Every setting is a field of :class:`Settings`. The CLI builds its options from these fields
(so a flag, its environment variable and its TOML key always share one name), and nothing
else in reaper reads ``os.environ``: components receive the values they need as keyword
arguments.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import stat
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any

from reaper.errors import ConfigError
from reaper.vocab import PartitionAction, Strategy

# Defaults. Retentions come from the control plane's own rules: a session lives 72 h after it
# lapses (long enough to see why it lapsed), a silent bootstrap member 30 days, an ephemeral
# member an hour (CI runners and scale tests re-enroll, they never come back).
DEFAULT_SESSION_RETENTION = timedelta(hours=72)
DEFAULT_NODE_RETENTION = timedelta(days=30)
DEFAULT_EPHEMERAL_NODE_RETENTION = timedelta(hours=1)
# Rows per batch (the heap walk's cap per block range; the index path's LIMIT). Bench B1
# (1,333,333 of 2,000,000 requests, PostgreSQL 15, 2 shared cores, target 50 ms), five rounds
# each on an AMD EPYC: 10,000 rows: median 1.68 s (1.39-1.81), batch p99 14-17 ms, 1.37 s of
# server CPU; 20,000: 1.43 s (1.14-1.55), p99 22-26 ms, 1.17-1.26 s of server CPU; one plain
# DELETE 1.22-1.50 s. Each batch costs the server a fixed share (its transaction, the
# statement's start), so half as many batches came 15% nearer one DELETE; on an older Intel
# machine the two were within noise (2.99 and 3.15 s). While other sessions use the database
# a batch aims at --busy-batch-seconds instead, so the size only rules on a quiet database.
# A steady-state index batch of 10,000 scattered rows takes ~0.1-0.2 s (bench B3).
DEFAULT_BATCH_SIZE = 20_000
# A heap-walk batch aims at this many seconds; its block range shrinks or grows to stay near it.
# bench --tune: 30 ms made the same sweep 5-25% slower (more, smaller batches) for no better
# p99 at 10,000 rows; the walk's 2x growth per step can overshoot the target, so it sits at
# half the 100 ms ceiling.
DEFAULT_BATCH_TARGET_SECONDS = 0.05
# A batch statement that runs longer than this is cancelled: a sweep never holds locks long.
DEFAULT_STATEMENT_TIMEOUT = timedelta(seconds=10)
# How long a batch may wait for a lock: a table lock (a migration's ACCESS EXCLUSIVE, say) or a
# row a writer holds (batches take no row lock of their own; the delete waits for the writer).
DEFAULT_LOCK_TIMEOUT = timedelta(seconds=1)
DEFAULT_IDLE_IN_TRANSACTION_SESSION_TIMEOUT = timedelta(seconds=60)
# The heap walk takes over from the index when a block sample finds at least this fraction of
# the table to be garbage. bench --crossover (2,000,000 requests, PostgreSQL 15, 2 cores): the
# index path took 0.55x the walk's time at 0.1% garbage, 0.66x at 0.5%, 0.90x at 1%, 1.02x at
# 2%, 1.28x at 5%, 2.8x at 20%: the crossover is at ~2%. On larger tables the index path's
# cost grows with its number of batches (each re-reads the dead index entries of the ones
# before), which reaper.engine.run.MAX_INDEX_BATCHES bounds.
DEFAULT_HEAP_WALK_THRESHOLD = 0.02
DEFAULT_CONNECT_TIMEOUT = timedelta(seconds=10)
# `reaper check`: a batch plan that reads a table of more rows than this sequentially fails.
# 10,000 rows is ~100 heap blocks, a millisecond of scan; below that the planner rightly
# prefers a scan to an index, above it a scan per batch grows with the table (DESIGN.md).
DEFAULT_SEQ_SCAN_MAX_ROWS = 10_000
# How often `reaper run` repeats the checks it runs at startup: an index a migration dropped,
# or left INVALID, is noticed within the hour.
DEFAULT_CHECK_INTERVAL = timedelta(hours=1)
# The daemon (`reaper run`): one port for /metrics, /healthz and /readyz. Loopback by default:
# the port tells table names, sizes and the database's health to whoever asks, so exposing it
# is the operator's choice (`--listen :9465`, as the deployment manifests do, behind a
# NetworkPolicy or a firewall). The deployment manifests and alert rules use 9465.
DEFAULT_LISTEN = "127.0.0.1:9465"
# Kubernetes sends SIGKILL 30 s after SIGTERM by default; 10 s leaves room for the pod's other
# containers and is 10x the default lock_timeout, the longest a healthy batch waits.
DEFAULT_SHUTDOWN_TIMEOUT = timedelta(seconds=10)
# Each run is delayed by a random 0..jitter x interval, so replicas and restarts spread out.
DEFAULT_JITTER = 0.1
# reaper_backlog_rows counts at most this many rows (an index-served count, LIMITed), and
# reaper_backlog_oldest_seconds looks at most at as many: each eligible row costs a heap page,
# so the limit sets a gauge's cost. Bench B5 (10,000,000 requests, 10,000 scattered
# eligible): 8 ms of server time at 1,000 (1,000 heap pages read, about 8 us each; 7-11 ms
# a gauge, against a 10 ms target), 19-22 ms at 100,000 (every eligible row read); beyond it
# the gauge says "at least 500", which is what an alert needs to know.
DEFAULT_BACKLOG_LIMIT = 500
# How often the backlog and storage gauges are refreshed (not on every scrape: the backlog
# count costs tens of milliseconds per sweep).
DEFAULT_GAUGE_INTERVAL = timedelta(minutes=1)
# Batches pause while a standby replays more than this far behind the primary (pacing).
DEFAULT_MAX_REPLICA_LAG = timedelta(seconds=10)
# While other sessions use the database, batches take at most this share of a run's wall time
# (bench B4, 4 clients refreshing: their p99 during the sweep was 0.98x before it at 0.5 and
# 1.07x at 0.25, against 1.81x unpaced; a quiet database is swept at full speed whatever it is).
DEFAULT_BUSY_SHARE = 0.5
# While other sessions use the database, a batch aims at this long: the latency a batch adds
# to a live transaction grows with its length (its CPU and the WAL a client's commit then
# flushes). Bench B4 on a quiet machine (live refresh p99 1.5 ms before the sweep): p99
# during 6-7 ms with 8,000-row batches (~11 ms each), 3.5 ms with 2,000, 2.9 ms with 1,000.
DEFAULT_BUSY_BATCH_SECONDS = 0.002
# After a failed run the sweep retries after failure_backoff, doubling per consecutive
# failure up to max_failure_backoff (then the success resets it).
DEFAULT_FAILURE_BACKOFF = timedelta(seconds=30)
DEFAULT_MAX_FAILURE_BACKOFF = timedelta(hours=1)

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
        raise ValueError(f"{text!r} is not a duration")
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


def _positive_duration(value: Any) -> timedelta:
    d = parse_duration(value)
    if d <= timedelta(0):
        raise ValueError(f"must be positive, got {format_duration(d)}")
    if d > MAX_DURATION:
        raise ValueError(f"{value!r} is longer than 100 years; is it a typo?")
    return d


def _positive_int(value: Any) -> int:
    n = _whole_number(value)
    if n <= 0:
        raise ValueError(f"must be a positive whole number, got {n}")
    if n > MAX_COUNT:
        raise ValueError(f"{n} is more than {MAX_COUNT:,}; is it a typo?")
    return n


def _optional_positive_int(value: Any) -> int | None:
    return None if value in (None, "", 0, "0") else _positive_int(value)


def _optional_positive_duration(value: Any) -> timedelta | None:
    return None if value in (None, "", 0, "0") else _positive_duration(value)


# A sweep interval this short is a typo (1ms for 1m): it would keep every sweep running back to
# back. The tests run sweeps every 200-300 ms.
MIN_INTERVAL = timedelta(milliseconds=100)


def _optional_interval(value: Any) -> timedelta | None:
    d = _optional_positive_duration(value)
    if d is not None and d < MIN_INTERVAL:
        raise ValueError(f"an interval of {format_duration(d)} is under 100ms; is it a typo?")
    return d


def _whole_number(value: Any) -> int:
    """A whole number from a TOML integer or a string of digits: never a float (2.7 is not
    silently 2), a boolean, or more digits than any count needs."""
    text = str(value).strip()
    if isinstance(value, bool | float) or not re.fullmatch(r"[+-]?\d{1,30}", text):
        raise ValueError(f"{_shown(value)} is not a whole number")
    return int(text)


def _non_negative_int(value: Any) -> int:
    n = _whole_number(value)
    if n < 0:
        raise ValueError(f"must be 0 or more, got {n}")
    if n > MAX_COUNT:
        raise ValueError(f"{n} is more than {MAX_COUNT:,}; is it a typo?")
    return n


def _fraction(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{_shown(value)} is not a number") from None
    if not 0.0 <= f <= 1.0:  # NaN fails this too
        raise ValueError(f"must be between 0 and 1, got {_shown(value)}")
    return f


def _share(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{_shown(value)} is not a number") from None
    if not 0.0 < f <= 1.0:  # NaN fails this too
        raise ValueError(f"must be more than 0 and at most 1, got {_shown(value)}")
    return f


# Wall times without a time zone (timestamp, date columns) are read as UTC unless the
# application writes them in another zone (timestamp_time_zone names it).
DEFAULT_TIMESTAMP_TIME_ZONE = "UTC"
# The full-table interlock: a run stops before its first delete when at least this fraction
# of a table is eligible. A predicate that matches everything (a typo, a retention in the
# wrong unit) reads as 100%; a real backlog of garbage that large means the table went
# unswept for 20 times its retention, which deserves a look and an explicit opt-in.
DEFAULT_MAX_ELIGIBLE_FRACTION = 0.95
# ... but only on tables with at least this many rows (projected from the sample): a table of
# a few hundred rows that is all garbage is common (a test bed, a quiet cluster) and cheap.
FULL_TABLE_MIN_ROWS = 1_000


def _time_zone(value: Any) -> str:
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


def _strategy(value: Any) -> str:
    if value not in STRATEGIES:
        raise ValueError(f"must be one of {', '.join(STRATEGIES)}, got {_shown(value)}")
    return str(value)


def _partition_action(value: Any) -> str:
    if value not in PARTITION_ACTIONS:
        raise ValueError(f"must be one of {', '.join(PARTITION_ACTIONS)}, got {value!r}")
    return str(value)


def _optional_str(value: Any) -> str | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ValueError(f"{_shown(value)} is not a string")
    return value


def _listen(value: Any) -> str:
    """``HOST:PORT``, ``:PORT`` (every interface) or ``[IPv6]:PORT``; returned as given."""
    if not isinstance(value, str):
        raise ValueError(f"{_shown(value)} is not a string")
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


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{_shown(value)} is not a boolean (use true or false)")


# What a setting of each kind (its metavar) takes: the fix named in its error message.
EXPECTED = {
    "ROWS": "a whole number of rows, e.g. 10000",
    "DURATION": 'a duration with a unit, e.g. "30d", "72h", "90s" or "500ms"',
    "FRACTION": "a number from 0 to 1, e.g. 0.1",
    "SHARE": "a number more than 0 and at most 1, e.g. 0.5",
    "DSN": 'a libpq connection string in quotes, e.g. "host=db.internal dbname=app"',
    "HOST:PORT": 'an address in quotes, e.g. "127.0.0.1:9465"',
    "FILE": 'a file path in quotes, e.g. "/etc/reaper/web.yml"',
    "ZONE": 'an IANA time zone name in quotes, e.g. "UTC" or "Asia/Seoul"',
    "auto|heap|index": 'one of "auto", "heap" or "index"',
    "drop|detach|off": 'one of "drop", "detach" or "off"',
    None: "true or false",
}
# Longest raw value quoted back in an error message (the line stays one readable line).
_SHOWN_CHARS = 40


def _shown(value: Any) -> str:
    """``value`` as an error message quotes it: repr (control characters escaped, so the
    message stays one line), cut at :data:`_SHOWN_CHARS`."""
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


def _setting(
    default: Any, parse: Callable[[Any], Any], help: str, metavar: str | None = None
) -> Any:
    return field(
        default=default,
        metadata={"parse": scalar(parse), "help": help, "metavar": metavar,
                  "expected": EXPECTED.get(metavar) or f"a valid {metavar}"},
    )


@dataclass(frozen=True)
class SweepSettings:
    """One ``[sweeps.NAME]`` table of the TOML file, parsed (durations as timedelta).

    For a built-in sweep it holds overrides; with ``table`` set it declares a new sweep
    (:func:`reaper.config.sweeps.configured_sweeps` turns both into
    :class:`reaper.config.sweeps.Sweep`).

    Attributes:
        enabled: False: the sweep runs only when named (``run-once --sweep NAME``).
        batch_size: rows per batch (None: the global ``batch_size``).
        interval: how often the daemon runs it (None: the daemon's default).
        max_rows_per_run, max_seconds_per_run: this sweep's budget per run (None: the global
            one).
        retention: one duration (the ``%(cutoff)s`` parameter), or cutoff parameter name ->
            duration when the predicate names several cutoffs; None: no override.
        after: sweeps that must run before this one.
        strategy: auto, heap or index for this sweep (None: the global ``strategy``).
        partition_action: drop, detach or off for this sweep (None: the global one).
        max_eligible_fraction: this sweep's full-table interlock (1: it may empty its
            table); None: the global ``max_eligible_fraction``.
        table, reason, predicate, description: a declared sweep's (None for a built-in).
        since: a declared sweep's "since" expression (see :class:`reaper.config.sweeps.Sweep`), for
            ``reaper_backlog_oldest_seconds``; None: no such gauge for it.
    """

    enabled: bool = True
    batch_size: int | None = None
    interval: timedelta | None = None
    max_rows_per_run: int | None = None
    max_seconds_per_run: timedelta | None = None
    retention: timedelta | Mapping[str, timedelta] | None = None
    after: tuple[str, ...] = ()
    strategy: str | None = None
    partition_action: str | None = None
    max_eligible_fraction: float | None = None
    table: str | None = None
    reason: str | None = None
    predicate: str | None = None
    description: str | None = None
    since: str | None = None


@dataclass(frozen=True)
class Settings:
    """Everything reaper is told, validated once and frozen.

    Each field's metadata carries its parser and help text; the CLI turns every field into a
    flag ``--field-name`` with the environment variable ``REAPER_FIELD_NAME``, and the TOML file
    uses the key ``field_name`` (or ``field-name``).
    """

    dsn: str | None = _setting(
        None,
        _optional_str,
        "libpq connection string or URI. Unset: libpq's PG* variables and service file.",
        "DSN",
    )
    batch_size: int = _setting(
        DEFAULT_BATCH_SIZE, _positive_int, "Rows deleted per batch transaction.", "ROWS"
    )
    session_retention: timedelta = _setting(
        DEFAULT_SESSION_RETENTION,
        _positive_duration,
        "Keep a member's row this long after its session lapsed (nodes_session).",
        "DURATION",
    )
    node_retention: timedelta = _setting(
        DEFAULT_NODE_RETENTION,
        _positive_duration,
        "Keep a silent bootstrap member, a resolved or pending request, an expired token and "
        "an expired router lease this long.",
        "DURATION",
    )
    ephemeral_node_retention: timedelta = _setting(
        DEFAULT_EPHEMERAL_NODE_RETENTION,
        _positive_duration,
        "Keep a silent ephemeral member, and the requests of an ephemeral token, this long.",
        "DURATION",
    )
    max_rows_per_run: int | None = _setting(
        None, _optional_positive_int, "Stop a sweep run after this many rows (0: no limit).", "ROWS"
    )
    max_seconds_per_run: timedelta | None = _setting(
        None,
        _optional_positive_duration,
        "Stop a sweep run after this long; the batch in flight finishes (0: no limit).",
        "DURATION",
    )
    statement_timeout: timedelta = _setting(
        DEFAULT_STATEMENT_TIMEOUT,
        _positive_duration,
        "PostgreSQL statement_timeout for reaper's statements.",
        "DURATION",
    )
    lock_timeout: timedelta = _setting(
        DEFAULT_LOCK_TIMEOUT,
        _positive_duration,
        "PostgreSQL lock_timeout: how long a batch may wait for a table lock.",
        "DURATION",
    )
    idle_in_transaction_session_timeout: timedelta = _setting(
        DEFAULT_IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
        _positive_duration,
        "PostgreSQL idle_in_transaction_session_timeout for reaper's sessions.",
        "DURATION",
    )
    connect_timeout: timedelta = _setting(
        DEFAULT_CONNECT_TIMEOUT,
        _positive_duration,
        "How long to wait for a database connection.",
        "DURATION",
    )
    strategy: str = _setting(
        "auto",
        _strategy,
        "How a sweep finds its batches: heap (walk the table in block ranges), index (the "
        "predicate's index), or auto (heap when a sample of the table finds much garbage).",
        "auto|heap|index",
    )
    heap_walk_threshold: float = _setting(
        DEFAULT_HEAP_WALK_THRESHOLD,
        _fraction,
        "With --strategy auto: walk the heap when at least this fraction of the table is garbage.",
        "FRACTION",
    )
    batch_target_seconds: timedelta = _setting(
        timedelta(seconds=DEFAULT_BATCH_TARGET_SECONDS),
        _positive_duration,
        "A heap-walk batch sizes its block range to take about this long.",
        "DURATION",
    )
    optimistic_batches: bool = _setting(
        True,
        _bool,
        "Ignored, accepted so that existing configurations still load: batches never lock "
        "their rows first (see docs/engine.md).",
    )
    session_pooler: bool = _setting(
        False,
        _bool,
        "The DSN points at a connection pooler in session mode (PgBouncer pool_mode=session: "
        "one server session per client connection). Off: a pooler is refused, since in "
        "transaction mode reaper's advisory locks cannot hold.",
    )
    partition_action: str = _setting(
        "drop",
        _partition_action,
        "What a sweep does with a partition whose bounds prove every row past the cutoff: "
        "drop (DETACH CONCURRENTLY, then DROP TABLE), detach (keep it as a table of its own) "
        "or off (delete its rows in batches). Needs ownership of the table.",
        "drop|detach|off",
    )
    synchronous_commit: bool = _setting(
        False,
        _bool,
        "Wait for each batch's WAL flush. Off by default: a crash can at worst undo the last "
        "batches' deletes, which the next sweep repeats (bench --tune: on made B1 ~15% slower).",
    )
    max_replica_lag: timedelta | None = _setting(
        DEFAULT_MAX_REPLICA_LAG,
        _optional_positive_duration,
        "Start no batch that would end with a standby (pg_stat_replication) replaying "
        "further behind than this; batches resume when it catches up (0: never pause for "
        "standbys).",
        "DURATION",
    )
    busy_share: float = _setting(
        DEFAULT_BUSY_SHARE,
        _share,
        "While other sessions use the database, batches take at most this fraction of a "
        "run's wall time, waiting between them (1: no pause for live traffic).",
        "SHARE",
    )
    busy_batch_seconds: timedelta = _setting(
        timedelta(seconds=DEFAULT_BUSY_BATCH_SECONDS),
        _positive_duration,
        "While other sessions use the database, each batch aims at this long (its row limit "
        "follows the rows per second of the batches before): a short batch adds little "
        "latency to a live transaction. Ignored with --busy-share 1.",
        "DURATION",
    )
    timestamp_time_zone: str = _setting(
        DEFAULT_TIMESTAMP_TIME_ZONE,
        _time_zone,
        "The time zone in which the application writes the timestamp (without time zone) and "
        "date columns that predicates compare with a cutoff: reaper reads their wall times "
        "in it (it is every reaper session's TimeZone). An IANA name, e.g. UTC, Asia/Seoul.",
        "ZONE",
    )
    max_eligible_fraction: float = _setting(
        DEFAULT_MAX_ELIGIBLE_FRACTION,
        _fraction,
        "A run stops before its first delete when at least this fraction of a table of "
        f"{FULL_TABLE_MIN_ROWS:,} rows or more is eligible (measured on a sample of its "
        "blocks); 1 allows a run to empty a table. A [sweeps.NAME] table may set its own.",
        "FRACTION",
    )
    seq_scan_max_rows: int = _setting(
        DEFAULT_SEQ_SCAN_MAX_ROWS,
        _non_negative_int,
        "reaper check: a sweep's batch plan that scans a table of more rows than this "
        "sequentially is a failure.",
        "ROWS",
    )
    check_interval: timedelta | None = _setting(
        DEFAULT_CHECK_INTERVAL,
        _optional_positive_duration,
        "reaper run: repeat the startup checks this often (0: only at startup).",
        "DURATION",
    )
    strict: bool = _setting(
        False,
        _bool,
        "Refuse to sweep when a check fails: reaper run does not start, run-once exits 1.",
    )
    interval: timedelta | None = _setting(
        None,
        _optional_interval,
        "reaper run: how often each sweep runs, unless its [sweeps.NAME] table sets interval "
        "(unset or 0: each sweep's own default, 5m for ephemeral members, 1h for the others).",
        "DURATION",
    )
    jitter: float = _setting(
        DEFAULT_JITTER,
        _fraction,
        "reaper run: delay each run by a random 0..FRACTION of its interval.",
        "FRACTION",
    )
    listen: str = _setting(
        DEFAULT_LISTEN,
        _listen,
        "reaper run: address of /metrics, /healthz and /readyz (:PORT is every interface; port 0 "
        "picks a free one, logged as http_listening).",
        "HOST:PORT",
    )
    web_config_file: str | None = _setting(
        None,
        _optional_str,
        "reaper run: a web config file (the Prometheus exporters' format) whose "
        "basic_auth_users (name: bcrypt hash) guard the HTTP port.",
        "FILE",
    )
    shutdown_timeout: timedelta = _setting(
        DEFAULT_SHUTDOWN_TIMEOUT,
        _positive_duration,
        "reaper run: on SIGTERM/SIGINT, exit within this long; a batch still running then is "
        "cancelled (rolled back).",
        "DURATION",
    )
    backlog_limit: int = _setting(
        DEFAULT_BACKLOG_LIMIT,
        _positive_int,
        "reaper run: reaper_backlog_rows counts at most this many rows.",
        "ROWS",
    )
    gauge_interval: timedelta = _setting(
        DEFAULT_GAUGE_INTERVAL,
        _positive_duration,
        "reaper run: how often the backlog and storage gauges are refreshed.",
        "DURATION",
    )
    failure_backoff: timedelta = _setting(
        DEFAULT_FAILURE_BACKOFF,
        _positive_duration,
        "reaper run: retry a failed sweep after this long, doubling per consecutive failure.",
        "DURATION",
    )
    max_failure_backoff: timedelta = _setting(
        DEFAULT_MAX_FAILURE_BACKOFF,
        _positive_duration,
        "reaper run: the longest wait between retries of a failing sweep.",
        "DURATION",
    )
    sweeps: Mapping[str, SweepSettings] = field(
        default_factory=dict, metadata={"parse": None, "help": None, "metavar": None}
    )

    def retention(self, name: str) -> timedelta:
        """The retention setting called ``name`` (e.g. ``node_retention``).

        Raises:
            ConfigError: no such retention setting.
        """
        value = getattr(self, name, None)
        if not isinstance(value, timedelta) or not name.endswith("retention"):
            raise ConfigError(f"unknown retention setting {name!r}")
        return value

    def sweep(self, name: str) -> SweepSettings:
        """The overrides of sweep ``name`` (defaults when the TOML file has none)."""
        return self.sweeps.get(name, SweepSettings())

    def batch_size_for(self, name: str) -> int:
        """Rows per batch for sweep ``name``: its own batch_size, else the global one."""
        return self.sweep(name).batch_size or self.batch_size

    def interval_for(self, name: str, default: timedelta) -> timedelta:
        """How often ``reaper run`` runs sweep ``name``: its [sweeps.NAME] interval, else
        ``--interval``, else ``default`` (the sweep's own)."""
        return self.sweep(name).interval or self.interval or default

    def max_rows_per_run_for(self, name: str) -> int | None:
        """Row budget of one run of sweep ``name``: its own, else the global one (None: none)."""
        return self.sweep(name).max_rows_per_run or self.max_rows_per_run

    def max_seconds_per_run_for(self, name: str) -> timedelta | None:
        """Time budget of one run of sweep ``name``: its own, else the global one (None: none)."""
        return self.sweep(name).max_seconds_per_run or self.max_seconds_per_run

    def max_eligible_fraction_for(self, name: str) -> float:
        """Sweep ``name``'s full-table interlock: its own ``max_eligible_fraction``, else the
        global one (a fraction of the table's rows, 0-1)."""
        own = self.sweep(name).max_eligible_fraction
        return self.max_eligible_fraction if own is None else own

    def strategy_for(self, name: str) -> str:
        """How sweep ``name`` finds its batches (auto, heap, index): its own, else the global."""
        return self.sweep(name).strategy or self.strategy

    def partition_action_for(self, name: str) -> str:
        """What sweep ``name`` does with a partition wholly past its cutoff (drop, detach,
        off): its own, else the global ``partition_action``."""
        return self.sweep(name).partition_action or self.partition_action

    def validate(self, source: str = "config file") -> Settings:
        """Check the rules that span several settings, and every sweep the ``[sweeps]`` tables
        declare or change (predicates parsed, ``after`` resolved); return self.

        Args:
            source: how to name the config file in a sweep's error message.

        Raises:
            ConfigError: one line naming the setting and the fix.
        """
        if self.ephemeral_node_retention > self.node_retention:
            raise ConfigError(
                "ephemeral_node_retention "
                f"({format_duration(self.ephemeral_node_retention)}) is longer than "
                f"node_retention ({format_duration(self.node_retention)}): an ephemeral member "
                "must not outlive a regular one; shorten it or lengthen node_retention"
            )
        if self.failure_backoff > self.max_failure_backoff:
            raise ConfigError(
                f"failure_backoff ({format_duration(self.failure_backoff)}) is longer than "
                f"max_failure_backoff ({format_duration(self.max_failure_backoff)}); shorten it "
                "or lengthen max_failure_backoff"
            )
        # Imported here: reaper.config.sweeps builds on these settings (it reads them, they never
        # read it), and this is the one place where settings ask for the sweeps' verdict.
        from reaper.config.sweeps import configured_sweeps

        try:
            configured_sweeps(self)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        return self


SETTING_FIELDS = tuple(f for f in dataclasses.fields(Settings) if f.metadata.get("parse"))


# A reaper config is a few kilobytes; past this a --config is the wrong file (a log, a dump).
MAX_CONFIG_BYTES = 1024 * 1024


def load_toml(path: Path) -> dict[str, Any]:
    """Read a TOML config file: a regular file of at most :data:`MAX_CONFIG_BYTES`, so that
    a directory, a device (``/dev/zero``), a FIFO (which would block ``open``) or a huge file
    is refused at once instead of read.

    Raises:
        ConfigError: the file is missing, unreadable, not a regular file, too large, or not
            valid UTF-8 TOML.
    """
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise ConfigError(f"config file {path} is {what}; give --config a TOML file")
        # O_NONBLOCK: were it swapped for a FIFO since the stat, open() still returns at once.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise ConfigError(f"config file {path} is not a regular file; give a TOML file")
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"config file {path} is larger than {MAX_CONFIG_BYTES // 1024} KiB; is it the "
            "right file?"
        )
    try:
        return tomllib.loads(data.decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text; save it as UTF-8") from None


def build_settings(
    explicit: Mapping[str, Any],
    file_values: Mapping[str, Any] | None = None,
    *,
    source: str = "config file",
    labels: Mapping[str, str] | None = None,
) -> Settings:
    """Build and validate :class:`Settings`.

    Args:
        explicit: values from flags or REAPER_* variables, by field name; they win.
        labels: how to name an explicit value's origin in errors, by field name (e.g.
            ``REAPER_NODE_RETENTION`` for a value from the environment); default its flag.
        file_values: the TOML file's top-level table (keys with ``_`` or ``-``); its
            ``[sweeps.NAME]`` tables become per-sweep overrides.
        source: how to name the file in error messages.

    Raises:
        ConfigError: an unknown key, a value that does not parse, or a rule that fails;
            the message names the setting and says how to fix it.
    """
    names = {f.name: f for f in SETTING_FIELDS}
    values: dict[str, Any] = {}
    file_values = dict(file_values or {})
    sweeps_table = file_values.pop("sweeps", {})
    for key, raw in file_values.items():
        name = key.replace("-", "_")
        if name not in names:
            raise ConfigError(
                f"{source}: unknown setting {_shown(key)}"
                + (did_you_mean(name, [*names, "sweeps"])
                   or f"; known settings: {', '.join(sorted(names))}")
            )
        values[name] = (raw, f"{source} key {key}")
    for name, raw in explicit.items():
        values[name] = (raw, (labels or {}).get(name) or "--" + name.replace("_", "-"))
    parsed: dict[str, Any] = {}
    for name, (raw, where) in values.items():
        try:
            parsed[name] = names[name].metadata["parse"](raw)
        except (ValueError, TypeError, OverflowError) as exc:
            expected = names[name].metadata["expected"]
            if isinstance(raw, str):
                # Quotes matter in TOML, where a bare 9465 is a number; a flag is text anyway.
                expected = expected.replace(" in quotes", "")
            raise ConfigError(f"{where}: {exc}; expected {expected}") from None
    parsed["sweeps"] = _parse_sweeps_table(sweeps_table, source)
    return Settings(**parsed).validate(source)


def did_you_mean(key: str, known: Iterable[str]) -> str | None:
    """``; did you mean 'x'?`` for the known name closest to a mistyped ``key`` (None when
    none is close), as click does for flags."""
    close = difflib.get_close_matches(key.replace("-", "_"), list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else None


SWEEP_NAME = re.compile(r"[a-z][a-z0-9_]*")
_SWEEP_KEYS = {f.name for f in dataclasses.fields(SweepSettings)}


def _parse_sweeps_table(table: Any, source: str) -> dict[str, SweepSettings]:
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [sweeps] must be a table of [sweeps.NAME] tables")
    out = {}
    for name, body in table.items():
        where = f"{source}: [sweeps.{name if SWEEP_NAME.fullmatch(name) else _shown(name)}]"
        if not SWEEP_NAME.fullmatch(name):
            raise ConfigError(
                f"{where}: a sweep name is lower case letters, digits and _ (a metric label), "
                "starting with a letter"
            )
        if not isinstance(body, dict):
            raise ConfigError(f"{where} must be a table")
        body = {k.replace("-", "_"): v for k, v in body.items()}
        if "key" in body:
            raise ConfigError(
                f"{where}: remove 'key': reaper batches by tuple id (ctid), selected and "
                "re-checked in one statement, so a sweep needs no key column"
            )
        unknown = set(body) - _SWEEP_KEYS
        if unknown:
            guesses = "".join(
                filter(None, (did_you_mean(k, _SWEEP_KEYS) for k in sorted(unknown)))
            )
            raise ConfigError(
                f"{where} has unknown key(s) {', '.join(sorted(unknown))}"
                + (guesses or f"; known: {', '.join(sorted(_SWEEP_KEYS))}")
            )
        try:
            out[name] = _parse_sweep(body)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{where} {exc}") from None
    return out


def _keyed(key: str, parse: Callable[[Any], Any], value: Any) -> Any:
    try:
        return parse(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"{key}: {exc}") from None


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    check_text(value, multiline=True)
    return value.strip()


def _name(value: Any) -> str:
    """A table name or a metric label: one line of text."""
    text = _text(value)
    check_text(text)
    return text


def _retention(value: Any) -> timedelta | dict[str, timedelta]:
    if isinstance(value, dict):
        if not value:
            raise ValueError("an empty table; give { cutoff_name = \"30d\", ... }")
        out = {}
        for param, raw in value.items():
            if not re.fullmatch(r"[a-z_][a-z0-9_]*", param):
                raise ValueError(f"{param!r} is not a parameter name (lower case, digits, _)")
            out[param] = _keyed(param, scalar(_positive_duration), raw)
        return out
    d: timedelta = scalar(_positive_duration)(value)
    return d


def _after(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError('must be a list of sweep names, e.g. after = ["other_sweep"]')
    for v in value:
        check_text(v)
    return tuple(value)


def _parse_sweep(body: Mapping[str, Any]) -> SweepSettings:
    parsers: dict[str, Callable[[Any], Any]] = {
        "enabled": scalar(_bool),
        "batch_size": scalar(_positive_int),
        "interval": scalar(_optional_interval),
        "max_rows_per_run": scalar(_optional_positive_int),
        "max_seconds_per_run": scalar(_optional_positive_duration),
        "retention": _retention,
        "after": _after,
        "strategy": scalar(_strategy),
        "partition_action": scalar(_partition_action),
        "max_eligible_fraction": scalar(_fraction),
        "table": _name,
        "reason": _name,
        "predicate": _text,
        "description": _text,
        "since": _text,
    }
    return SweepSettings(**{k: _keyed(k, parsers[k], v) for k, v in body.items()})


def reload_settings(config_path: Path | None, explicit: Mapping[str, Any]) -> Settings:
    """Settings re-read for a reload (SIGHUP): the TOML file at ``config_path`` read again,
    under the same flags and REAPER_* values (``explicit``, by field name) that still win,
    validated as at startup. The caller keeps its running settings when this raises.

    Raises:
        ConfigError: one line naming the file and what is wrong with it.
    """
    file_values = load_toml(config_path) if config_path else {}
    return build_settings(explicit, file_values, source=str(config_path or "config"))


def changed_settings(old: Settings, new: Settings) -> list[str]:
    """Names of the settings (fields, and ``sweeps.NAME`` tables) whose values differ."""
    out = [f.name for f in SETTING_FIELDS if getattr(old, f.name) != getattr(new, f.name)]
    for name in sorted(set(old.sweeps) | set(new.sweeps)):
        if old.sweep(name) != new.sweep(name):
            out.append(f"sweeps.{name}")
    return out

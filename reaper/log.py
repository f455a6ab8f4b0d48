"""Logging, configured once: structlog for reaper's events, stdlib records (psycopg_pool,
APScheduler) rendered through the same processors. JSON lines when stderr is not a terminal,
every field of the record; readable colour lines when it is, each the event and its few key
figures (:func:`brief`), about one line at 80 columns.

Every record passes one chokepoint before either renderer (:func:`safe_fields`): each value
bounded in depth, items and length (:func:`bounded`), a password scrubbed wherever one goes.
A traceback shows the frames and their source lines, never a frame's local variables. What
reaches a terminal is inert (:func:`inert`): a name from the database cannot move the cursor,
recolour a line or reverse its text."""

from __future__ import annotations

import inspect
import itertools
import re
import sys
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import structlog.types

LEVELS = ("debug", "info", "warning", "error")

# What a console line leaves out, all of it in the JSON record: the logger's name, the
# run's bookkeeping (when its lock was taken and released, each cutoff), and what the sweep's
# name already says (its table, its reason label).
CONSOLE_LEFT_OUT = frozenset(
    {
        "logger",
        "locked_at",
        "unlocked_at",
        "cutoffs",
        "table",
        "reason",
        "strategy",
    }
)
# At most this many fields after the event, each value cut to CONSOLE_VALUE_CHARS.
CONSOLE_FIELDS = 4
CONSOLE_VALUE_CHARS = 56
# Values that are a field's normal case, left out like a 0: a run that ended by itself.
CONSOLE_IDLE = {"stopped_by": "done"}
# Kept as they are: a traceback is never shortened.
_KEPT = ("timestamp", "level", "event", "exception", "exc_info", "stack")
# The fields that hold a traceback (formatted, or the exception itself): never shortened.
_TRACEBACKS = frozenset({"exception", "exc_info", "stack"})

# Any value of a log line: at most this many levels of nested containers (deeper ones are
# "..."), this many items in each, this many characters in each string. A jsonb value nested
# thousands deep would otherwise fail its renderer (RecursionError) and the sweep with it.
LOG_VALUE_DEPTH = 8
LOG_VALUE_ITEMS = 10_000
LOG_VALUE_CHARS = 8192

# What a terminal would act on rather than show: C0 and C1 control characters (ESC, CR,
# BEL, backspace, newline), DEL, and the invisible format characters (bidirectional
# overrides and isolates, zero-width ones, line and paragraph separators).
_ACTIVE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
    "\u2060-\u206f\ufeff\ufff9-\ufffb]"
)
# Where a password goes: password=value (quoted or not), a URI's user:password@.
_PASSWORDS = (
    re.compile(r"(password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|[^\s'\",;]+)", re.IGNORECASE),
    re.compile(r"(\b[a-z][\w+.-]*://[^:/@?#\s]*:)[^@/?#\s]+(?=@)", re.IGNORECASE),
)


def inert(text: str) -> str:
    """``text`` as a terminal shows it and never acts on it: each control or invisible
    format character written as its Python escape (ESC as ``\\x1b``, CR as ``\\r``, U+202E
    as ``\\u202e``), all else as it is."""
    if _ACTIVE.search(text) is None:
        return text
    return _ACTIVE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def inert_lines(text: str) -> str:
    """``text`` :func:`inert` line by line: its newlines kept (a traceback, a message of
    several lines), every other control character escaped."""
    return "\n".join(inert(line) for line in text.split("\n"))


def unsecret(text: str) -> str:
    """``text`` with any password in it (``password=...``, a URI's ``user:...@``) as
    ``***``."""
    for pattern in _PASSWORDS:
        text = pattern.sub(r"\1***", text)
    return text


def bounded(value: Any) -> Any:
    """``value`` as a log line holds it: strings cut to LOG_VALUE_CHARS (ending ``...``),
    passwords scrubbed, containers (dict, list, tuple, set) at most LOG_VALUE_ITEMS items
    (the rest counted) and LOG_VALUE_DEPTH levels deep (deeper ones as ``"..."``); numbers,
    booleans, None and other objects as they are. Never recurses past LOG_VALUE_DEPTH."""
    return _bounded(value, LOG_VALUE_DEPTH)


def _bounded(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        text = unsecret(value)
        if len(text) > LOG_VALUE_CHARS:
            return text[: LOG_VALUE_CHARS - 3] + "..."
        return value if text == value else text
    if not isinstance(value, (dict, list, tuple, set, frozenset)):
        return value
    if depth <= 0:
        return "..."
    more = len(value) - LOG_VALUE_ITEMS
    if isinstance(value, dict):
        out: dict[Any, Any] = {
            (k if isinstance(k, (str, int, float, bool)) or k is None else str(k)): _bounded(
                v, depth - 1
            )
            for k, v in itertools.islice(value.items(), LOG_VALUE_ITEMS)
        }
        if more > 0:
            out["..."] = f"{more:,} more"
        return out
    items = [_bounded(v, depth - 1) for v in itertools.islice(value, LOG_VALUE_ITEMS)]
    if more > 0:
        items.append(f"... {more:,} more")
    return tuple(items) if isinstance(value, tuple) else items


def safe_fields(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """The one chokepoint before any renderer: every field :func:`bounded`, a formatted
    traceback whole but with its passwords scrubbed."""
    for key, value in event.items():
        if key in _TRACEBACKS:
            if isinstance(value, str):
                event[key] = unsecret(value)
        else:
            event[key] = bounded(value)
    return event


def plain_traceback(sio: TextIO, exc_info: Any) -> None:
    """A console line's traceback: frames and source lines as the standard library
    formats them (never a frame's local variables), passwords scrubbed, each line inert."""
    import traceback

    text = "".join(traceback.format_exception(*exc_info)).rstrip("\n")
    sio.write("\n" + inert_lines(unsecret(text)))


def _says_nothing(value: Any) -> bool:
    """None, false, 0 and empty containers: a field at its idle value."""
    if value is None or value is False:
        return True
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value == 0
    return isinstance(value, (dict, list, tuple, set, str)) and not value


def brief(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A console line's record: the time of day, the level, the event (followed by its
    sweep's name, if any) and its first CONSOLE_FIELDS fields that say something (a 0 count,
    an empty list, an idle value and the fields of CONSOLE_LEFT_OUT say nothing to a reader),
    each value at most CONSOLE_VALUE_CHARS long; the rest is in the JSON record. ``rows`` is
    kept at 0: it is the figure of a sweep. Every text is :func:`inert`."""
    out: dict[str, Any] = {k: event[k] for k in _KEPT if k in event}
    for k in ("event", "level"):
        if isinstance(out.get(k), str):
            out[k] = inert(out[k])
    for k in ("exception", "stack"):
        if isinstance(out.get(k), str):
            out[k] = inert_lines(out[k])
    stamp = out.get("timestamp")
    if isinstance(stamp, str) and "T" in stamp:
        out["timestamp"] = stamp.split("T", 1)[1][:8]
    # The subject of most events follows its name: "sweep_finished nodes_silent rows=...".
    if isinstance(event.get("sweep"), str) and isinstance(out.get("event"), str):
        out["event"] = f"{out['event']} {inert(event['sweep'])}"
    kept = 0
    for key, value in event.items():
        if key in out or key in CONSOLE_LEFT_OUT or key == "sweep" or kept >= CONSOLE_FIELDS:
            continue
        if (_says_nothing(value) and key != "rows") or CONSOLE_IDLE.get(key) == value:
            continue
        text = value if isinstance(value, (int, float)) else inert(str(value))
        if isinstance(text, str) and len(text) > CONSOLE_VALUE_CHARS:
            text = text[: CONSOLE_VALUE_CHARS - 3] + "..."
        out[inert(str(key))] = text
        kept += 1
    return out


def _unpadded() -> dict[str, Any]:
    """ConsoleRenderer's options for no padding after the level and the event, as this
    structlog names them (``pad_event_to`` since 25.5, ``pad_event`` before)."""
    import structlog

    names = inspect.signature(structlog.dev.ConsoleRenderer).parameters
    out: dict[str, Any] = {"pad_event_to" if "pad_event_to" in names else "pad_event": 0}
    if "pad_level" in names:
        out["pad_level"] = False
    return out


def _load_structlog() -> None:
    """Load structlog without rich.

    structlog's console renderer and traceback helpers import rich whenever it is installed
    (with the pygments and attrs it brings, about 50 ms of a start), to draw a traceback in
    colour with each frame's local variables: a connection string among them. reaper draws
    its tracebacks itself (:func:`plain_traceback`), so rich is kept out while structlog
    loads. Where rich or structlog is loaded already, nothing changes.
    """
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    # A None entry makes `import rich` raise ImportError, which structlog catches.
    sys.modules["rich"] = None  # type: ignore[assignment]
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]


def configure(level: str = "info", json: bool | None = None) -> None:
    """Set up logging to stderr.

    Args:
        level: the lowest level shown (debug, info, warning, error).
        json: JSON lines (True), console lines (False), or by whether stderr is a TTY (None).
    """
    # Imported here, not at the top: the command line reads LEVELS on every start
    # (`reaper --version` too), and structlog costs tens of milliseconds.
    import logging

    if json is None:
        json = not sys.stderr.isatty()
    _load_structlog()
    import structlog

    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderers: list[structlog.types.Processor] = (
        [structlog.processors.JSONRenderer()]
        if json
        else [
            brief,
            structlog.dev.ConsoleRenderer(
                colors=sys.stderr.isatty(),
                sort_keys=False,
                exception_formatter=plain_traceback,
                **_unpadded(),
            ),
        ]
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *([] if not json else [structlog.processors.format_exc_info]),
            safe_fields,
            *renderers,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # APScheduler warns at every tick that a sweep still running from the last one was not
    # started again (max_instances=1 is how reaper wants it): noise, one line per interval.
    logging.getLogger("apscheduler.scheduler").setLevel(max(logging.ERROR, root.level))
    # The pool logs every failed connection attempt at WARNING; reaper reports them itself.
    logging.getLogger("psycopg.pool").setLevel(max(logging.ERROR, root.level))

"""Logging, configured once: structlog for reaper's events, stdlib records (psycopg_pool,
APScheduler) rendered through the same processors. JSON lines when stderr is not a terminal,
every field of the record; readable colour lines when it is, each the event and its few key
figures (:func:`brief`), about one line at 80 columns."""

from __future__ import annotations

import inspect
import sys
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

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
    kept at 0: it is the figure of a sweep."""
    out: dict[str, Any] = {k: event[k] for k in _KEPT if k in event}
    stamp = out.get("timestamp")
    if isinstance(stamp, str) and "T" in stamp:
        out["timestamp"] = stamp.split("T", 1)[1][:8]
    # The subject of most events follows its name: "sweep_finished nodes_silent rows=...".
    if isinstance(event.get("sweep"), str) and isinstance(out.get("event"), str):
        out["event"] = f"{out['event']} {event['sweep']}"
    kept = 0
    for key, value in event.items():
        if key in out or key in CONSOLE_LEFT_OUT or key == "sweep" or kept >= CONSOLE_FIELDS:
            continue
        if (_says_nothing(value) and key != "rows") or CONSOLE_IDLE.get(key) == value:
            continue
        text = value if isinstance(value, (int, float)) else str(value)
        if isinstance(text, str) and len(text) > CONSOLE_VALUE_CHARS:
            text = text[: CONSOLE_VALUE_CHARS - 3] + "..."
        out[key] = text
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


def _load_structlog(rich_tracebacks: bool) -> None:
    """Load structlog, without rich unless ``rich_tracebacks``.

    structlog's console renderer and traceback helpers import rich whenever it is installed
    (with the pygments and attrs it brings, about 50 ms of a start), to draw a traceback
    in colour. JSON lines never draw one, so for them rich is kept out while structlog
    loads: structlog then formats a traceback as the standard library does, whole. Console
    lines, which a person reads, keep rich's tracebacks. Where rich or structlog is loaded
    already, nothing changes.
    """
    if rich_tracebacks or "structlog" in sys.modules or "rich" in sys.modules:
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
    _load_structlog(rich_tracebacks=not json)
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

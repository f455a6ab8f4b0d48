"""Logging, configured once: structlog for reaper's events, stdlib records (psycopg_pool,
APScheduler) rendered through the same processors. JSON lines when stderr is not a terminal,
readable colour lines when it is."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import structlog.types

LEVELS = ("debug", "info", "warning", "error")


def configure(level: str = "info", json: bool | None = None) -> None:
    """Set up logging to stderr.

    Args:
        level: the lowest level shown (debug, info, warning, error).
        json: JSON lines (True), console lines (False), or by whether stderr is a TTY (None).
    """
    # Imported here, not at the top: the command line reads LEVELS on every start
    # (`reaper --version` too), and structlog brings rich with it.
    import logging

    import structlog

    if json is None:
        json = not sys.stderr.isatty()
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
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
            structlog.processors.format_exc_info,
            renderer,
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

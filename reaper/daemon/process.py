"""The process of ``reaper run``: signals, the main loop and the exit.

SIGTERM and SIGINT ask the daemon to stop (the handler only sets a flag); SIGHUP asks for a
reload, done on the main thread, not in the handler. The loop waits for either, then stops
the daemon within ``--shutdown-timeout`` and exits: 0 after a stop request, or the daemon's
exit code for a fatal error (2: a connection on which advisory locks do not hold; 1:
``--strict`` refused to start), with its reason on stderr.

What the daemon does between start and stop is :class:`reaper.daemon.scheduler.Daemon`'s business.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import click
import structlog

from reaper.config.settings import Settings
from reaper.config.sweeps import Sweep
from reaper.daemon.scheduler import Daemon
from reaper.log import inert_lines

# The command's logger: these lines are the command's, as they always were.
log = structlog.get_logger("reaper.cli")

# Exit code after a stop request (SIGTERM, SIGINT).
EXIT_STOPPED = 0
# How often the main thread looks for a stop or a reload request (seconds).
LOOP_SECONDS = 0.2


def serve(daemon: Daemon, load: Callable[[], tuple[Settings, Sequence[Sweep]]]) -> NoReturn:
    """Start ``daemon``, run until a stop request or a fatal error, stop it, and exit.

    Args:
        daemon: built, not started.
        load: re-reads and validates the configuration for a SIGHUP (see
            :meth:`reaper.daemon.scheduler.Daemon.reload`).
    """
    reload_requested = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("stop_requested", signal=signal.Signals(signum).name)
        daemon.request_stop()

    def on_hup(signum: int, _frame: Any) -> None:
        reload_requested.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_hup)
    daemon.start()
    while not daemon.exit_requested.wait(LOOP_SECONDS):
        if reload_requested.is_set():
            reload_requested.clear()
            log.info("reload_requested", signal="SIGHUP")
            daemon.reload(load)
    clean = daemon.stop()
    if daemon.fatal:
        click.echo(inert_lines(f"reaper: {daemon.fatal}"), err=True)
        exit_now(daemon.fatal_exit_code, clean)
    exit_now(EXIT_STOPPED, clean)


def exit_now(code: int, clean: bool) -> NoReturn:
    """Exit now, without waiting for threads: the sweeps have stopped (or, when ``clean`` is
    False, had their statements cancelled) and the pool and the port are closed; what is left
    is at most a readiness probe waiting on a dead host, which must not delay the exit."""
    if not clean:
        log.warning("exit_with_runs_in_flight")
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)

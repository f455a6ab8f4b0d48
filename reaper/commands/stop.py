"""``run-once``'s stop on a signal: the first SIGINT or SIGTERM ends the sweeps after their
batch in flight (:class:`StopOnSignal`), so that the command still reports what they did; a
second one, once :data:`REPEAT_SECONDS` have passed, acts as it would without reaper's handler
(SIGTERM ends the process at once, SIGINT aborts it)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# A signal this soon after the first is the same request: Ctrl-C reaches the whole process
# group, and a wrapper (make, a shell, a process manager) often forwards it once more.
REPEAT_SECONDS = 2.0


class StopOnSignal:
    """While entered, the first SIGINT or SIGTERM sets :attr:`stop` (the engine's stop event,
    checked between batches and ending a pacer's wait) and is kept in :attr:`signum`. Another
    within :data:`REPEAT_SECONDS` is the same request; a later one is handed to the handler in
    place before (which ends or aborts the process). On exit, those handlers are put back; after
    a signal, SIGINT and SIGTERM are ignored instead (the process is exiting).

    Python runs signal handlers on the main thread only: entered on another thread (a test
    calling the command in-process, say), it installs nothing and :attr:`stop` is never set.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.stop = threading.Event()
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._clock = clock
        self._first_at: float | None = None

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                # One the process was started ignoring (nohup; SIGINT for a shell script's
                # background job) stays ignored, as it was meant to.
                if signal.getsignal(signum) != signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.signum is None:
            self._restore()
            return
        # The process has reported and exits with 128 + the signal's number, within the
        # bounds of its connections' timeouts: a forwarded copy must not kill it meanwhile,
        # and Python puts its own handlers back to the default while it finalizes.
        for signum in self._previous:
            signal.signal(signum, signal.SIG_IGN)
        self._previous.clear()

    @property
    def requested(self) -> bool:
        """A signal was received (:attr:`stop` is set a moment later, if not yet)."""
        return self.signum is not None

    @property
    def signal_name(self) -> str | None:
        """``SIGINT`` or ``SIGTERM`` once one was received, else None."""
        return None if self.signum is None else signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int | None:
        """128 + the signal's number (130 after SIGINT, 143 after SIGTERM), as a shell reports
        a process the signal ended; None when none was received."""
        return None if self.signum is None else 128 + self.signum

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        now = self._clock()
        if self._first_at is not None:
            if now - self._first_at < REPEAT_SECONDS:
                return
            # A second request: the process ends as it would have without this handler.
            self._restore()
            signal.raise_signal(signum)
            return
        self._first_at = now
        self.signum = signum
        # Set from a thread of its own: the handler runs on the main thread between two of
        # its bytecodes, possibly inside stop.wait() (a pacer's wait) while it holds the
        # event's lock, which set() takes too and would wait for forever.
        threading.Thread(target=self.stop.set, name="reaper-stop", daemon=True).start()

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            # None: a handler installed outside Python, which cannot be put back.
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        self._previous.clear()

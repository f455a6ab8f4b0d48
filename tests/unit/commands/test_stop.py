"""run-once's stop on a signal (:class:`reaper.commands.stop.StopOnSignal`), with real signals
sent to this process: the first sets the stop, another soon after is the same request, a
later one reaches the handlers before it, which are back after the block; a signal the
process ignores stays ignored, and off the main thread nothing is installed.
tests/process/commands/test_run_once_signals.py runs the command."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from reaper.commands.stop import REPEAT_SECONDS, SIGNALS, StopOnSignal


@pytest.fixture
def received() -> Iterator[list[int]]:
    """The signals that reached the handler in place before StopOnSignal (this fixture's)."""
    got: list[int] = []

    def before(signum: int, _frame: Any) -> None:
        got.append(signum)

    saved = {s: signal.signal(s, before) for s in SIGNALS}
    try:
        yield got
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


class Clock:
    """Monotonic seconds that the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_the_first_signal_sets_the_stop_and_a_later_one_reaches_the_handler_before(
    received: list[int], signum: int, code: int
) -> None:
    before = signal.getsignal(signum)
    clock = Clock()
    with StopOnSignal(clock) as interrupt:
        assert signal.getsignal(signum) != before
        assert not interrupt.requested and interrupt.exit_code is None
        signal.raise_signal(signum)
        assert interrupt.requested
        assert interrupt.stop.wait(10)
        assert (interrupt.exit_code, interrupt.signal_name) == (code, signal.Signals(signum).name)
        assert received == []
        clock.now += REPEAT_SECONDS
        signal.raise_signal(signum)
        assert received == [signum]
        assert signal.getsignal(signum) == before
    assert all(signal.getsignal(s) == before for s in SIGNALS)


@pytest.mark.parametrize("signum", SIGNALS)
@pytest.mark.parametrize("other", SIGNALS)
def test_a_signal_soon_after_the_first_is_the_same_request(
    received: list[int], signum: int, other: int
) -> None:
    """Ctrl-C reaches the process group, and a wrapper (make, a shell) forwards it once more:
    the run still stops after its batch and reports, as after one signal."""
    clock = Clock()
    with StopOnSignal(clock) as interrupt:
        signal.raise_signal(signum)
        for _ in range(3):
            clock.now += REPEAT_SECONDS / 4
            signal.raise_signal(other)
        assert received == []
        assert interrupt.signum == signum
        assert interrupt.stop.wait(10)
    # The process reports and exits: a copy that comes meanwhile cannot end it early.
    assert all(signal.getsignal(s) == signal.SIG_IGN for s in SIGNALS)
    signal.raise_signal(other)
    assert received == []


def test_the_handlers_before_are_back_after_the_block_without_a_signal(
    received: list[int],
) -> None:
    before = {s: signal.getsignal(s) for s in SIGNALS}
    with StopOnSignal() as interrupt:
        pass
    assert {s: signal.getsignal(s) for s in SIGNALS} == before
    assert not interrupt.stop.is_set()


def test_a_signal_the_process_ignores_stays_ignored(received: list[int]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with StopOnSignal() as interrupt:
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        signal.raise_signal(signal.SIGINT)
        assert not interrupt.requested
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def test_off_the_main_thread_no_handler_is_installed(received: list[int]) -> None:
    before = {s: signal.getsignal(s) for s in SIGNALS}
    during: dict[int, Any] = {}

    def enter() -> None:
        with StopOnSignal():
            during.update({s: signal.getsignal(s) for s in SIGNALS})

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join(10)
    assert during == before

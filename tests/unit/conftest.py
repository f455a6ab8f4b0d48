"""The unit layer: no PostgreSQL, no subprocess, no network, no sleeping.

Each is refused here, at its door, so that a unit test that reaches for one fails at once
and says where it belongs (tests/db or tests/process) instead of slowing ``make unit``.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest


def _refuse(what: str, where: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a unit test {what}: move it under {where}")

    return refused


@pytest.fixture(autouse=True)
def _unit_layer(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("starts a process", "tests/process"))
    monkeypatch.setattr(
        psycopg.Connection, "connect", _refuse("connects to PostgreSQL", "tests/db")
    )
    real_connect = socket.socket.connect
    real_sleep = time.sleep

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise AssertionError("a unit test opens a network connection: move it under tests/db")
        return real_connect(self, address)

    def sleep(seconds: float) -> None:
        # Threads a test starts may wait; the test itself takes the time as a value instead.
        if threading.current_thread() is threading.main_thread() and seconds > 0:
            raise AssertionError("a unit test sleeps: pass the time in (a fake clock) instead")
        real_sleep(seconds)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(time, "sleep", sleep)
    yield

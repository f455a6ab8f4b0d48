"""The order of bcrypt checks: addresses and networks that guessed wrong wait behind those that
did not, the checks run one at a time, and those that would wait too long are turned away."""

from __future__ import annotations

import asyncio
import base64
import threading
from typing import Any

import pytest

from reaper.daemon import auth as auth_module
from reaper.daemon.auth import (
    CHECKS_AT_ONCE,
    MAX_WAITING_CHECKS,
    BasicAuth,
    Check,
    CheckQueue,
    Verdict,
)

HASH4 = b"$2b$04$Y9X1jOLsCQ/pMA8vfcTzUeSOA2h.WRkecvsnja5ydF6hOK4eJ0.sC"
USERS = {f"user-{i}": HASH4 for i in range(20)}


def _header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_an_address_that_guessed_wrong_ranks_behind_one_that_did_not() -> None:
    auth = BasicAuth(USERS)
    assert auth.verify(_header("user-0", "guess"), "10.1.1.1") is Verdict.DENY
    guessed = auth.screen(_header("user-0", "scrape-pw"), "10.1.1.1")
    same_network = auth.screen(_header("user-0", "scrape-pw"), "10.1.1.2")
    elsewhere = auth.screen(_header("user-0", "scrape-pw"), "10.9.9.9")
    v6 = auth.screen(_header("user-0", "scrape-pw"), "2001:db8::1")
    assert isinstance(guessed, Check) and isinstance(same_network, Check)
    assert isinstance(elsewhere, Check) and isinstance(v6, Check)
    assert elsewhere.rank == v6.rank == (0, 0, 0, 0)
    assert elsewhere.rank < same_network.rank < guessed.rank
    # A success clears the address, not its network.
    assert auth.verify(_header("user-0", "scrape-pw"), "10.1.1.1") is Verdict.ALLOW
    again = auth.screen(_header("user-1", "scrape-pw"), "10.1.1.1")
    assert isinstance(again, Check) and again.rank[:3] == (0, 0, 1)


def test_an_address_that_keeps_asking_ranks_behind_one_that_asks_once() -> None:
    """Guesses turned away before their check are no failures, but still count: 100 fresh
    addresses asking again at once must not rank with a scraper's first try."""
    auth = BasicAuth(USERS)
    for _ in range(5):
        assert isinstance(auth.screen(_header("user-0", "guess"), "10.2.0.1"), Check)
    asking = auth.screen(_header("user-0", "guess"), "10.2.0.1")
    first = auth.screen(_header("user-0", "scrape-pw"), "10.3.0.1")
    assert isinstance(asking, Check) and isinstance(first, Check)
    assert first.rank < asking.rank


class _Gate:
    """Check.run held until released, recording the order of the checks."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.started = threading.Semaphore(0)
        self.release = threading.Event()
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()

    def run(self, check: Check) -> bool:
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.order.append(check.client)
        self.started.release()
        self.release.wait(10)
        with self._lock:
            self.running -= 1
        return check.password == b"scrape-pw"


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> _Gate:
    gate = _Gate()
    monkeypatch.setattr(auth_module.Check, "run", lambda self: gate.run(self))
    return gate


def test_a_clean_address_is_checked_before_guessing_ones_and_the_worst_are_turned_away(
    gate: _Gate,
) -> None:
    """About 100 guessing addresses once kept the one check busy: a right password not yet
    verified got 503 on every try."""
    auth = BasicAuth(USERS)
    for n in range(10):  # ten addresses that guessed wrong before, each its own network
        auth.settle(_check(auth, "guess", f"10.0.{n}.1"), matched=False)

    async def main() -> dict[str, Verdict]:
        queue = CheckQueue(auth)
        results: dict[str, Verdict] = {}

        async def ask(client: str, password: str, user: str = "user-0") -> None:
            results[client] = await queue.verify(_header(user, password), client)

        tasks = [asyncio.create_task(ask("10.0.0.1", "guess"))]  # runs first (nothing waits)
        await asyncio.to_thread(gate.started.acquire)
        for n in range(1, 10):  # guessers fill the queue and more
            tasks.append(asyncio.create_task(ask(f"10.0.{n}.1", "guess")))
        await asyncio.sleep(0.05)
        tasks.append(asyncio.create_task(ask("192.0.2.7", "scrape-pw", "user-7")))
        await asyncio.sleep(0.05)
        gate.release.set()
        await asyncio.gather(*tasks)
        queue.close()
        return results

    results = asyncio.run(main())
    assert results["192.0.2.7"] is Verdict.ALLOW
    # At once, beside the check in flight: its place is kept for a clean address.
    assert gate.order[:2] == ["10.0.0.1", "192.0.2.7"]
    assert gate.most == CHECKS_AT_ONCE + 1
    busy = [c for c, v in results.items() if v is Verdict.BUSY]
    assert len(busy) == 9 - MAX_WAITING_CHECKS
    assert all(results[c] is Verdict.DENY for c in gate.order if c != "192.0.2.7")


def test_a_client_that_leaves_while_it_waits_frees_its_place(gate: _Gate) -> None:
    auth = BasicAuth(USERS)
    for client in ["10.0.0.1", *(f"10.0.1.{i}" for i in range(MAX_WAITING_CHECKS))]:
        auth.settle(_check(auth, "guess", client), matched=False)  # they wait their turn

    async def main() -> list[Any]:
        queue = CheckQueue(auth)
        first = asyncio.create_task(queue.verify(_header("user-0", "x"), "10.0.0.1"))
        await asyncio.to_thread(gate.started.acquire)
        gone = [
            asyncio.create_task(queue.verify(_header("user-0", "x"), f"10.0.1.{i}"))
            for i in range(MAX_WAITING_CHECKS)
        ]
        await asyncio.sleep(0.05)
        for task in gone:
            task.cancel()
        gate.release.set()
        later = await queue.verify(_header("user-1", "scrape-pw"), "10.0.2.1")
        results = [await first, later]
        queue.close()
        return results

    assert asyncio.run(main()) == [Verdict.DENY, Verdict.ALLOW]
    assert gate.order == ["10.0.0.1", "10.0.2.1"]


def _check(auth: BasicAuth, password: str, client: str) -> Check:
    check = auth.screen(_header("user-0", password), client)
    assert isinstance(check, Check)
    return check

"""HTTP basic auth against bcrypt hashes, at a bounded cost, for the HTTP port.

A bcrypt check takes a core for up to a third of a second. So the checks run one at a time,
with one more place kept for addresses that have not guessed. Those waiting are served best
first: an address with no recent failure before one that guessed wrong. A client with the
right password is answered within a second, however many addresses guess at once.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import itertools
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum

# bcrypt reads 72 bytes of a password at most; a longer one can never match (exporter-toolkit
# refuses it too).
MAX_PASSWORD_BYTES = 72
# A client address whose password was wrong this many times in a row (a typo or two is
# free) waits before its next bcrypt check, 1 s doubling with each further failure up to the
# maximum; a success clears it.
FAILURES_BEFORE_PENALTY = 3
FAILURE_PENALTY_SECONDS = 1.0
MAX_FAILURE_PENALTY_SECONDS = 30.0
# Client addresses (and networks) remembered for their failures at most; the oldest go first.
MAX_PENALIZED_CLIENTS = 1024
# Failures are also counted per network (an IPv4 /24, an IPv6 /64): a crowd of addresses of
# one network that guesses waits behind the addresses of other networks.
_NETWORK_BITS = {4: 24, 6: 64}
# bcrypt checks at once: one core at most, so guessing never takes the whole machine (and
# one more, kept for addresses that have not guessed: CheckQueue).
CHECKS_AT_ONCE = 1
# Checks waiting for their turn at most; past this the worst placed waiter is answered 503.
MAX_WAITING_CHECKS = 4


class Verdict(StrEnum):
    """What basic auth decides about one request."""

    ALLOW = "allow"
    DENY = "deny"
    # Other checks are ahead of this one: answered 503 with Retry-After, at once.
    BUSY = "busy"


@dataclass
class _Record:
    """What an address (or a network) did since its last success."""

    fails: int = 0  # wrong passwords in a row
    tries: int = 0  # requests that needed a check, whatever came of them
    until: float = 0.0  # denied without a check until then (monotonic seconds)


# A check's place in the queue, lowest first: the address's wrong passwords, its requests
# that needed a check, then the same two of its network.
Rank = tuple[int, int, int, int]


@dataclass(frozen=True)
class Check:
    """A password to check with bcrypt: what :meth:`BasicAuth.screen` could not decide."""

    user: str
    password: bytes = field(repr=False)
    hashed: bytes | None = field(repr=False)
    stand_in: bytes = field(repr=False)
    digest: bytes = field(repr=False)
    client: str
    rank: Rank

    def run(self) -> bool:
        """Whether the password matches (bcrypt: up to a third of a second of one core)."""
        import bcrypt

        try:
            matched = bcrypt.checkpw(self.password, self.hashed or self.stand_in)
        except ValueError:  # a password bcrypt refuses (there is no such password)
            return False
        return matched and self.hashed is not None


class BasicAuth:
    """Basic auth's decisions against bcrypt hashes.

    - A password verified once is remembered (per user, as a SHA-256 digest of hash and
      password, never in clear): a scraper pays bcrypt once, then microseconds.
    - A client address whose password was wrong :data:`FAILURES_BEFORE_PENALTY` times in a
      row gets no check for a while (:data:`FAILURE_PENALTY_SECONDS`, doubling to
      :data:`MAX_FAILURE_PENALTY_SECONDS`; denied at once meanwhile).
    - Each check is ranked (:data:`Rank`): an address that guessed wrong, or keeps asking
      without success, waits behind one that did not.
    - An unknown user costs what a known one does (a check against a hash of the highest
      cost configured): the time of an answer does not tell which users exist.
    - A header that does not decode, or a password over :data:`MAX_PASSWORD_BYTES`, is
      denied without a check.

    Args:
        users: name -> bcrypt hash, at least one.
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self, users: Mapping[str, bytes], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._users = dict(users)
        # The costliest hash stands in for unknown users: their check costs what a known
        # user's costs at most.
        self._stand_in = max(self._users.values(), key=lambda h: int(h[4:6]))
        self._clock = clock
        self._verified: dict[str, bytes] = {}
        # By address and by network, the least recently seen first.
        self._records: dict[str, _Record] = {}
        self._lock = threading.Lock()

    def screen(self, header: str, client: str) -> Verdict | Check:
        """Decide about an ``Authorization`` header sent from address ``client`` without
        bcrypt, or say which check would decide."""
        credentials = _parse_basic(header)
        if credentials is None:
            return Verdict.DENY
        user, password = credentials
        hashed = self._users.get(user)
        digest = hashlib.sha256(
            (hashed or self._stand_in) + b"\0" + user.encode() + b"\0" + password
        ).digest()
        with self._lock:
            known = self._verified.get(user)
            if known is not None and hmac.compare_digest(known, digest):
                return Verdict.ALLOW
            address, network = self._record(client), self._record(_network(client))
            if self._clock() < address.until:
                return Verdict.DENY
            rank = (address.fails, address.tries, network.fails, network.tries)
            address.tries += 1
            network.tries += 1
        return Check(user, password, hashed, self._stand_in, digest, client, rank)

    def settle(self, check: Check, matched: bool) -> Verdict:
        """Record the outcome of ``check``: a match is remembered and clears the address's
        record; a mismatch counts against the address and its network."""
        with self._lock:
            if matched:
                self._verified[check.user] = check.digest
                self._records.pop(check.client, None)
                return Verdict.ALLOW
            address = self._record(check.client)
            self._record(_network(check.client)).fails += 1
            address.fails += 1
            if address.fails >= FAILURES_BEFORE_PENALTY:
                exponent = address.fails - FAILURES_BEFORE_PENALTY
                penalty = min(MAX_FAILURE_PENALTY_SECONDS, FAILURE_PENALTY_SECONDS * 2.0**exponent)
                address.until = self._clock() + penalty
        return Verdict.DENY

    def verify(self, header: str, client: str) -> Verdict:
        """:meth:`screen`, then the check in this thread if one is needed."""
        screened = self.screen(header, client)
        if isinstance(screened, Verdict):
            return screened
        return self.settle(screened, screened.run())

    def _record(self, key: str) -> _Record:
        """The record of an address or network, moved last (the oldest are forgotten)."""
        record = self._records.pop(key, None) or _Record()
        self._records[key] = record
        while len(self._records) > MAX_PENALIZED_CLIENTS:
            del self._records[next(iter(self._records))]
        return record


def _network(client: str) -> str:
    """The network of an address (its /24 or /64), the address itself when it is none."""
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return client
    bits = _NETWORK_BITS[address.version]
    return str(ipaddress.ip_network((address, bits), strict=False))


def _parse_basic(header: str) -> tuple[str, bytes] | None:
    """(user, password) of a ``Basic`` Authorization header, None when it is not one."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(token.strip(), validate=True).decode().partition(":")
    except ValueError:  # not base64 (binascii.Error), not ASCII, not UTF-8
        return None
    raw = password.encode()
    if not sep or len(raw) > MAX_PASSWORD_BYTES:
        return None
    return user, raw


class CheckQueue:
    """The bcrypt checks of an event loop, in threads of their own.

    :data:`CHECKS_AT_ONCE` run at a time, and one more for a clean address (no wrong
    password, no request that needed a check since its last success): a scraper never waits
    for a guesser's check. At most :data:`MAX_WAITING_CHECKS` wait, lowest
    :attr:`Check.rank` first. When one more would wait, the worst placed waiter (highest
    rank, then the newest) is turned away (:attr:`Verdict.BUSY`).
    """

    def __init__(self, auth: BasicAuth) -> None:
        self._auth = auth
        self._threads = ThreadPoolExecutor(CHECKS_AT_ONCE + 1, thread_name_prefix="reaper-bcrypt")
        self._running = 0  # checks running
        self._unclean = 0  # of them, checks of addresses that are not clean
        self._order = itertools.count()
        # (rank, arrival, turn): the turn's result says whether the waiter runs.
        self._waiting: list[tuple[Rank, int, asyncio.Future[bool]]] = []

    async def verify(self, header: str, client: str) -> Verdict:
        """Decide about a request's ``Authorization`` header, sent from ``client``."""
        screened = self._auth.screen(header, client)
        if isinstance(screened, Verdict):
            return screened
        loop = asyncio.get_running_loop()
        rank = screened.rank
        if self._may_run(rank):
            self._start(rank)
        elif not await self._turn(loop, rank):
            return Verdict.BUSY
        # The place is freed when bcrypt returns, even if this request's client went away.
        done = loop.run_in_executor(self._threads, screened.run)
        done.add_done_callback(lambda _: self._release(rank))
        matched = await asyncio.shield(done)
        return self._auth.settle(screened, matched)

    def _may_run(self, rank: Rank) -> bool:
        if self._running > CHECKS_AT_ONCE:
            return False
        return rank[:2] == (0, 0) or self._unclean < CHECKS_AT_ONCE

    def _start(self, rank: Rank) -> None:
        self._running += 1
        self._unclean += rank[:2] != (0, 0)

    async def _turn(self, loop: asyncio.AbstractEventLoop, rank: Rank) -> bool:
        """Wait for a place to run (True), or be turned away (False)."""
        turn: asyncio.Future[bool] = loop.create_future()
        entry = (rank, next(self._order), turn)
        # A waiter whose client went away is cancelled at once, and removed here or as it ends.
        self._waiting = [e for e in self._waiting if not e[2].done()]
        self._waiting.append(entry)
        if len(self._waiting) > MAX_WAITING_CHECKS:
            worst = max(self._waiting, key=lambda e: (e[0], e[1]))
            self._waiting.remove(worst)
            if not worst[2].done():
                worst[2].set_result(False)
        try:
            return await turn
        except asyncio.CancelledError:  # the client went away
            if entry in self._waiting:
                self._waiting.remove(entry)
            elif turn.done() and not turn.cancelled() and turn.result():
                self._release(rank)  # its place, given as it went
            raise

    def _release(self, rank: Rank) -> None:
        """A check ended: the best placed waiters that may run, run."""
        self._running -= 1
        self._unclean -= rank[:2] != (0, 0)
        while True:
            ready = [e for e in self._waiting if not e[2].done() and self._may_run(e[0])]
            if not ready:
                return
            best = min(ready, key=lambda e: (e[0], e[1]))
            self._waiting.remove(best)
            self._start(best[0])
            best[2].set_result(True)

    def close(self) -> None:
        """Stop the check thread (a check in flight finishes)."""
        self._threads.shutdown(wait=False, cancel_futures=True)

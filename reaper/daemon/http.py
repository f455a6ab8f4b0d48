"""The daemon's one HTTP port: ``/metrics``, ``/healthz`` and ``/readyz``.

``/metrics`` is prometheus-client's own WSGI app, served by waitress, so reaper parses no HTTP
itself. The invariant: **the port answers**. Whatever any number of clients does (connect and
idle, trickle, pipeline, never read, send wrong passwords), a well-behaved scraper is answered
within a second and the process's memory stays within a few MiB of its baseline. waitress
reads every request on one event loop and hands only complete requests to its worker
threads, so a client that sends slowly, or never finishes, costs a buffer of at most
:data:`MAX_HEADER_BYTES`, never a thread. On top of waitress's own limits reaper bounds:

- connections: at most :data:`MAX_CONNECTIONS`; when full, the connection whose exchange
  began longest ago (idle between requests, waiting for its request to arrive, pipelining, or
  not reading its answer) is closed to admit the new one, so no set of clients can lock a
  scraper out;
- a request's arrival: its headers must arrive whole within :data:`READ_TIMEOUT_SECONDS` of its
  first byte (or of the connection), however slowly they trickle in;
- an answer's departure: an answer the client does not read for :data:`READ_TIMEOUT_SECONDS`
  closes the connection;
- pipelining: one request of a connection at a time; the next is parsed only once the answer
  to the previous one has been sent, and the kernel buffers at most
  :data:`SEND_BUFFER_BYTES` of answers, so a client that pipelines thousands and never reads
  costs two renders, holds one answer and one read buffer, never a worker thread;
- an idle keep-alive connection: closed after :data:`IDLE_TIMEOUT_SECONDS`;
- CPU: a ``/metrics`` answer is reused for :data:`METRICS_REUSE_SECONDS`, one render at a
  time (:class:`SharedRenders`), so any number of scrapes at once costs one render;
- headers: at most :data:`MAX_HEADER_BYTES` in all and :data:`MAX_HEADER_COUNT` lines, else
  ``431``; a body: at most :data:`MAX_BODY_BYTES`, else ``413``.

The health endpoints ask callables for their answer:

- ``/healthz``: the process and its scheduler are alive (200 ``ok``, else 503 and why);
- ``/readyz``: the database answered recently and the tables reaper sweeps exist (503 with
  the class of the reason; the reason itself only to a request that passed basic auth).

With a web config file (``--web-config-file``, the format of Prometheus exporters'
exporter-toolkit) every path asks for HTTP basic auth against bcrypt hashes, at a bounded
cost: see :class:`BasicAuth`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, make_wsgi_app
from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher
from waitress.utilities import RequestHeaderFieldsTooLarge

from reaper.config.files import read_regular_file
from reaper.config.values import split_listen
from reaper.errors import ConfigError

log = structlog.get_logger("reaper.http")

# A check answers (ok, reason): reason is the one line shown with a 503.
Check = Callable[[], tuple[bool, str]]
# The readiness check answers (ok, reason class, reason): the class is what anyone may read
# (never the connection target), the reason what a request that passed basic auth reads.
Readiness = Callable[[], tuple[bool, str, str]]
StartResponse = Callable[..., Any]

_INDEX = b"reaper: /metrics (Prometheus), /healthz (alive), /readyz (database answers)\n"
# Set in the WSGI environ of a request that passed basic auth.
AUTHENTICATED = "reaper.authenticated"

# Open connections at most. One scraper or two, the kubelet's probes, a person with curl: 64
# leaves room for all of them; when full, the oldest exchange makes room for a new one.
MAX_CONNECTIONS = 64
# A request's headers in all. Prometheus sends ~300 bytes, curl ~100; 16 KiB is 50x that.
MAX_HEADER_BYTES = 16 * 1024
# Header lines of a request. Prometheus sends 6, curl 3.
MAX_HEADER_COUNT = 64
# No endpoint takes a body.
MAX_BODY_BYTES = 1024
# A request must arrive whole within this long of its first byte (slowloris), and an answer
# must be read within this long of its last progress.
READ_TIMEOUT_SECONDS = 10.0
# A keep-alive connection with no request for this long is closed (Prometheus reconnects).
IDLE_TIMEOUT_SECONDS = 60.0
# Threads that run complete requests (a scrape renders in milliseconds). At most one of them
# runs a bcrypt check at a time (BasicAuth), so the others always serve scrapes.
WORKER_THREADS = 3
# Bytes read from a connection at once: the most a pipelining client has waiting in reaper.
RECV_BYTES = 8192
# The kernel's send buffer of each connection (SO_SNDBUF, inherited from the listener). An
# answer (~40 KB with the built-in sweeps) fits; a client that does not read stalls after one
# or two answers, instead of after the ~4 MiB Linux would buffer for it (a hundred renders of
# /metrics per pipelining client, each taking CPU from the scrapers).
SEND_BUFFER_BYTES = 64 * 1024
# A /metrics answer is served again for this long (SharedRenders): a burst of scrapes costs
# one render. Prometheus scrapes every 15 s or more; two servers of an HA pair may share one.
METRICS_REUSE_SECONDS = 0.2
# Kinds of /metrics answers kept (by method, query, Accept, Accept-Encoding): Prometheus
# asks one or two; past this the oldest is forgotten.
MAX_METRICS_KINDS = 8
# How often the event loop looks for connections past their deadlines.
_MAINTENANCE_SECONDS = 1.0


@dataclass(frozen=True)
class _Answer:
    at: float
    status: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


class SharedRenders:
    """A WSGI app (prometheus-client's) whose answers are reused for
    :data:`METRICS_REUSE_SECONDS`: however many clients ask at once, the metrics are rendered
    once per that interval per kind of answer (method, query, ``Accept``, ``Accept-Encoding``),
    one render at a time, so scrapes cost the port's CPU at most one render at a time.

    Args:
        app: the WSGI app whose answers depend on nothing but those four.
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self, app: Callable[..., Any], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._app = app
        self._clock = clock
        self._answers: dict[tuple[str, ...], _Answer] = {}
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        key = tuple(
            str(environ.get(k, ""))
            for k in ("REQUEST_METHOD", "QUERY_STRING", "HTTP_ACCEPT", "HTTP_ACCEPT_ENCODING")
        )
        with self._lock:
            answer = self._answers.get(key)
            if answer is None or self._clock() - answer.at > METRICS_REUSE_SECONDS:
                answer = self._render(environ)
                self._answers.pop(key, None)  # re-inserted last: the oldest kind goes first
                self._answers[key] = answer
                while len(self._answers) > MAX_METRICS_KINDS:
                    del self._answers[next(iter(self._answers))]
        start_response(answer.status, list(answer.headers))
        return [answer.body]

    def _render(self, environ: dict[str, Any]) -> _Answer:
        started: list[Any] = []

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            started[:] = [status, headers]
            return lambda data: None

        body = b"".join(self._app(environ, start))
        return _Answer(self._clock(), started[0], tuple(started[1]), body)


def make_app(registry: CollectorRegistry, healthz: Check, readyz: Readiness) -> Callable[..., Any]:
    """The WSGI app: ``/metrics`` from ``registry``, ``/healthz`` and ``/readyz`` from the
    checks (200 ``ok`` or 503 with the reason, text/plain), ``/`` a one-line index, else 404.

    ``/readyz`` shows the reason only to a request that passed basic auth; anyone else
    reads its class (``database unreachable``), never a connection target or a table."""
    metrics_app = SharedRenders(make_wsgi_app(registry))

    def text(start: StartResponse, status: str, body: str) -> Iterable[bytes]:
        data = body.encode()
        start(
            status,
            [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))],
        )
        return [data]

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            result: Iterable[bytes] = metrics_app(environ, start_response)
            return result
        if path == "/healthz":
            ok, reason = healthz()
            if ok:
                return text(start_response, "200 OK", "ok\n")
            return text(start_response, "503 Service Unavailable", f"unhealthy: {reason}\n")
        if path == "/readyz":
            ready, kind, reason = readyz()
            if ready:
                return text(start_response, "200 OK", "ok\n")
            # The reason names the target, tables and roles: the log line database_not_ready
            # carries it, and a request that passed basic auth reads it.
            shown = reason if environ.get(AUTHENTICATED) else kind
            return text(start_response, "503 Service Unavailable", f"not ready: {shown}\n")
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [_INDEX]
        return text(start_response, "404 Not Found", "not found: try /metrics, /healthz, /readyz\n")

    return app


# -- web config (exporter-toolkit format) ------------------------------------------------------

# A web config file is a few lines; past this it is the wrong file.
MAX_WEB_CONFIG_BYTES = 64 * 1024
# bcrypt's cost factor at most: each step doubles a check's time. Cost 12 takes ~0.35 s on
# one core here, so a scraper's first answer (its password not yet verified) comes within a
# second; a cost-31 hash would hold a worker thread for days.
MAX_BCRYPT_COST = 12
# bcrypt reads 72 bytes of a password at most; a longer one can never match (exporter-toolkit
# refuses it too).
MAX_PASSWORD_BYTES = 72
_BCRYPT_HASH = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
_MAKE_HASH = "make one with: htpasswd -nBC 10 '' | tr -d ':\\n'"


@dataclass(frozen=True)
class WebConfig:
    """A web config file's settings: ``basic_auth_users`` (name -> bcrypt hash), never empty.

    TLS (``tls_server_config``) is refused with a one-line error: terminate TLS in front of
    the port (a sidecar or the service mesh) instead.
    """

    basic_auth_users: Mapping[str, bytes] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> WebConfig:
        """Read and check a web config file (YAML): a regular file of at most
        :data:`MAX_WEB_CONFIG_BYTES` that names at least one user, each with a bcrypt hash of
        cost at most :data:`MAX_BCRYPT_COST`.

        Raises:
            ConfigError: the file cannot be read, is not a regular file, is too large, is not
                YAML of the expected shape, names TLS, names no user, or holds a hash that is
                not bcrypt or costs too much; one line naming the fix.
        """
        import yaml

        where = f"--web-config-file {path}"
        data = read_regular_file(
            path,
            name=where,
            expect="give it a YAML file with basic_auth_users",
            limit_bytes=MAX_WEB_CONFIG_BYTES,
        )
        try:
            text = data.decode("utf-8")
            doc = yaml.safe_load(text) if text.strip() else {}
        except (UnicodeDecodeError, yaml.YAMLError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"{where} is not valid YAML: {first}") from None
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            raise ConfigError(f"{where}: expected a mapping with basic_auth_users")
        unknown = set(doc) - {"basic_auth_users", "tls_server_config", "http_server_config"}
        if unknown:
            raise ConfigError(
                f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; known: "
                "basic_auth_users"
            )
        if doc.get("tls_server_config"):
            raise ConfigError(
                f"{where}: tls_server_config is not served by reaper's port; remove it and "
                "terminate TLS in front of the port (a sidecar, the service mesh)"
            )
        users = doc.get("basic_auth_users")
        if users is not None and not isinstance(users, dict):
            raise ConfigError(f"{where}: basic_auth_users must map user names to bcrypt hashes")
        if not users:
            # Without users the port would be open: a file given to guard it must guard it.
            raise ConfigError(
                f"{where}: basic_auth_users names no user, so nothing would be guarded; add "
                f"one (name: bcrypt hash; {_MAKE_HASH}) or leave --web-config-file out"
            )
        out: dict[str, bytes] = {}
        for name, hashed in users.items():
            shown = repr(str(name)[:40])
            if not isinstance(name, str) or not name or ":" in name:
                raise ConfigError(
                    f"{where}: basic_auth_users: the user name {shown} cannot be sent in basic "
                    "auth; use a non-empty name without ':'"
                )
            match = _BCRYPT_HASH.fullmatch(hashed) if isinstance(hashed, str) else None
            if match is None:
                raise ConfigError(
                    f"{where}: basic_auth_users: the value for {shown} is not a bcrypt hash; "
                    f"{_MAKE_HASH}"
                )
            cost = int(match.group(1))
            if not 4 <= cost <= MAX_BCRYPT_COST:
                raise ConfigError(
                    f"{where}: basic_auth_users: the hash for {shown} has cost {cost}; reaper "
                    f"takes 4 to {MAX_BCRYPT_COST} (each step doubles the time of a check); "
                    f"{_MAKE_HASH}"
                )
            out[name] = hashed.encode()
        return cls(out)


class Verdict(StrEnum):
    """What basic auth decides about one request."""

    ALLOW = "allow"
    DENY = "deny"
    # Another password is being checked: answered 503 with Retry-After, at once.
    BUSY = "busy"


# A client address whose password was wrong this many times in a row (a typo or two is
# free) waits before its next bcrypt check, 1 s doubling with each further failure up to the
# maximum; a success clears it.
FAILURES_BEFORE_PENALTY = 3
FAILURE_PENALTY_SECONDS = 1.0
MAX_FAILURE_PENALTY_SECONDS = 30.0
# Client addresses remembered for their failures at most (the oldest is forgotten first).
MAX_PENALIZED_CLIENTS = 1024


class BasicAuth:
    """HTTP basic auth against bcrypt hashes, at a bounded cost.

    - A password verified once is remembered (per user, as a SHA-256 digest of hash and
      password, never in clear): a scraper pays bcrypt once, then microseconds.
    - At most one bcrypt check runs at a time; a request that would need a second one while
      it runs gets :attr:`Verdict.BUSY` at once. So wrong passwords hold one worker thread
      at most, and the others keep serving scrapes.
    - A client address whose password was wrong :data:`FAILURES_BEFORE_PENALTY` times in a
      row gets no bcrypt check for a while (:data:`FAILURE_PENALTY_SECONDS`, doubling to
      :data:`MAX_FAILURE_PENALTY_SECONDS`; denied at once meanwhile): one guessing client
      cannot keep the check busy for others.
    - An unknown user costs what a known one does (a check against a hash of the highest
      cost configured): the time of an answer does not tell which users exist.
    - A header that does not decode, or a password over :data:`MAX_PASSWORD_BYTES`, is
      denied without a check.

    Args:
        users: name -> bcrypt hash (:class:`WebConfig`), at least one.
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
        self._penalties: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self._check = threading.Lock()

    def verify(self, header: str, client: str) -> Verdict:
        """Decide about a request's ``Authorization`` header, sent from address ``client``."""
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
            fails, until = self._penalties.get(client, (0, 0.0))
            if self._clock() < until:
                return Verdict.DENY
        if not self._check.acquire(blocking=False):
            return Verdict.BUSY
        try:
            import bcrypt

            matched = bcrypt.checkpw(password, hashed or self._stand_in) and hashed is not None
        except ValueError:  # a password bcrypt refuses (there is no such password)
            matched = False
        finally:
            self._check.release()
        with self._lock:
            if matched:
                self._verified[user] = digest
                self._penalties.pop(client, None)
                return Verdict.ALLOW
            fails += 1
            penalty = (
                0.0
                if fails < FAILURES_BEFORE_PENALTY
                else min(
                    MAX_FAILURE_PENALTY_SECONDS,
                    FAILURE_PENALTY_SECONDS * 2.0 ** (fails - FAILURES_BEFORE_PENALTY),
                )
            )
            self._penalties.pop(client, None)  # re-inserted last: the oldest go first
            self._penalties[client] = (fails, self._clock() + penalty)
            while len(self._penalties) > MAX_PENALIZED_CLIENTS:
                del self._penalties[next(iter(self._penalties))]
        return Verdict.DENY


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


def basic_auth(app: Callable[..., Any], users: Mapping[str, bytes]) -> Callable[..., Any]:
    """``app`` behind HTTP basic auth (:class:`BasicAuth`): 401 unless the request names a
    user of ``users`` with the password whose bcrypt hash it holds; 503 with ``Retry-After``
    while another password is being checked. A request that passes carries
    :data:`AUTHENTICATED` in its environ."""
    auth = BasicAuth(users)

    def answer(
        start_response: StartResponse, status: str, body: bytes, header: tuple[str, str]
    ) -> Iterable[bytes]:
        start_response(
            status,
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(body))),
                header,
            ],
        )
        return [body]

    def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        verdict = auth.verify(
            str(environ.get("HTTP_AUTHORIZATION", "")), str(environ.get("REMOTE_ADDR", ""))
        )
        if verdict is Verdict.BUSY:
            return answer(
                start_response,
                "503 Service Unavailable",
                b"busy checking another password; retry\n",
                ("Retry-After", "1"),
            )
        if verdict is Verdict.DENY:
            return answer(
                start_response,
                "401 Unauthorized",
                b"unauthorized\n",
                ("WWW-Authenticate", 'Basic realm="reaper"'),
            )
        environ[AUTHENTICATED] = True
        result: Iterable[bytes] = app(environ, start_response)
        return result

    return guarded


# -- the server ----------------------------------------------------------------------------------


class _Parser(HTTPRequestParser):  # type: ignore[misc]
    """waitress's request parser, with a limit on the number of header lines."""

    def parse_header(self, header_plus: bytes) -> None:
        # Lines after the request line (header_plus ends with the blank line).
        if header_plus.rstrip().count(b"\n") > MAX_HEADER_COUNT:
            # As waitress answers headers over the size limit: a stand-in request line, and
            # the error to send (the connection is then closed).
            super().parse_header(b"GET / HTTP/1.0\r\n")
            self.error = RequestHeaderFieldsTooLarge(f"more than {MAX_HEADER_COUNT} header lines")
            return
        super().parse_header(header_plus)


class _Channel(HTTPChannel):  # type: ignore[misc]
    """A connection that parses one request at a time, and remembers since when its current
    exchange runs and since when it waits for a request to arrive whole."""

    parser_class = _Parser
    # waitress's: the request being read (None between requests), the 100-continue latch.
    request: Any = None
    sent_continue = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A new connection waits for its first request from the moment it is accepted.
        self.waiting_since: float | None = self.creation_time
        # When the client last began an exchange: sent a request with nothing of its own
        # pending (no request, no answer unsent, nothing pipelined). Requests pipelined behind
        # it, and answers it leaves unread, are the same exchange: only a client that reads
        # its answers and asks again starts a new one. The oldest exchange is closed first.
        self.exchange_since: float = self.creation_time
        # Bytes read after a complete request (pipelined): parsed once its answer is sent.
        self.held = b""
        # The request being queued was pipelined (parsed from held bytes): it waits behind
        # the requests of every connection that asked anew (_Dispatcher).
        self.pipelined = False

    def readable(self) -> bool:
        if (
            self.held
            and not self.requests
            and not self.total_outbufs_len
            and not self.will_close
            and not self.close_when_flushed
        ):
            data, self.held = self.held, b""
            self.pipelined = True
            self._parse(data)
        return bool(super().readable())

    def received(self, data: bytes) -> bool:
        """Bytes from the socket."""
        if (
            data
            and not self.requests
            and not self.held
            and not self.total_outbufs_len
            and self.request is None
        ):
            self.exchange_since = time.time()
        self.pipelined = False
        return self._parse(data)

    def _parse(self, data: bytes) -> bool:
        """waitress's ``received``, but parsing stops at the end of the first complete
        request: the rest waits in :attr:`held` until the answer has left."""
        if not data:
            return False
        if self.waiting_since is None:
            self.waiting_since = time.time()
        with self.requests_lock:
            if self.will_close or self.close_when_flushed:
                return False
            while data:
                if self.request is None:
                    self.request = self.parser_class(self.adj)
                n = self.request.received(data)
                if (
                    self.request.expect_continue
                    and self.request.headers_finished
                    and not self.requests
                    and not self.sent_continue
                ):
                    self.send_continue()
                if self.request.completed:
                    self.sent_continue = False
                    complete = not self.request.empty
                    if complete:
                        self.requests.append(self.request)
                        if len(self.requests) == 1:
                            self.server.add_task(self)
                    self.request = None
                    if complete:
                        self.held = data[n:] + self.held
                        break
                if n >= len(data):
                    break
                data = data[n:]
        if self.request is None:  # nothing half-read: the request (if any) arrived whole
            self.waiting_since = None
        return True


class _Dispatcher(ThreadedTaskDispatcher):  # type: ignore[misc]
    """waitress's worker threads, serving a connection that asked anew before any pipelined
    request: a client that pipelines requests never delays another one's answer."""

    def add_task(self, task: Any) -> None:
        if getattr(task, "pipelined", False):
            super().add_task(task)
            return
        with self.lock:
            queue = self.queue
            first_pipelined = next(
                (i for i, t in enumerate(queue) if getattr(t, "pipelined", False)), len(queue)
            )
            queue.insert(first_pipelined, task)
            self.queue_cv.notify()


class _Server(TcpWSGIServer):  # type: ignore[misc]
    """waitress's server, plus deadlines on a request's arrival and an answer's departure,
    and eviction of the oldest exchange when full."""

    channel_class = _Channel

    def maintenance(self, now: float) -> None:
        super().maintenance(now)
        for channel in list(self.active_channels.values()):
            if channel.requests:
                continue
            since = channel.waiting_since
            if since is not None and now - since > READ_TIMEOUT_SECONDS:
                channel.will_close = True  # a request that never arrives whole
            elif channel.total_outbufs_len and now - channel.last_activity > READ_TIMEOUT_SECONDS:
                channel.will_close = True  # an answer that is not read

    def readable(self) -> bool:
        # The map also holds this listener and waitress's trigger. One place is kept free, so
        # that the listener always accepts; the connections whose exchange began longest ago
        # make room (idle keep-alive, stalled, pipelining or not reading), never the newest.
        excess = len(self._map) - self.adj.connection_limit + 1
        if excess > 0:
            open_ = [c for c in self.active_channels.values() if not c.will_close]
            doomed = len(self.active_channels) - len(open_)
            open_.sort(key=lambda c: c.exchange_since)
            for channel in open_[: max(0, excess - doomed)]:
                channel.will_close = True
        return bool(super().readable())


class HttpServer:
    """The port, served from a daemon thread.

    Args:
        listen: ``HOST:PORT``, ``:PORT`` (every interface) or ``[IPv6]:PORT``; port 0 picks
            a free port (tests), see :attr:`port`.
        app: the WSGI app (:func:`make_app`).
        web_config: a web config file (basic auth); None: no authentication.

    Raises:
        ConfigError: the address cannot be bound (in use, not an address of this host), or
            the web config file is invalid.
    """

    def __init__(
        self, listen: str, app: Callable[..., Any], web_config: Path | None = None
    ) -> None:
        if web_config is not None:
            app = basic_auth(app, WebConfig.load(web_config).basic_auth_users)
        host, port = split_listen(listen)
        bind_host = host or "0.0.0.0"  # ":9465": every IPv4 interface, as Prometheus expects
        try:
            family, addr = _best_family(bind_host, port)
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr)
        except OSError as exc:
            raise ConfigError(
                f"--listen {listen}: cannot listen there ({exc.strerror or exc}); choose a free "
                "port or an address of this host"
            ) from None
        adj = Adjustments(
            sockets=[sock],
            threads=WORKER_THREADS,
            connection_limit=MAX_CONNECTIONS,
            max_request_header_size=MAX_HEADER_BYTES,
            max_request_body_size=MAX_BODY_BYTES,
            channel_timeout=IDLE_TIMEOUT_SECONDS,
            recv_bytes=RECV_BYTES,
            cleanup_interval=_MAINTENANCE_SECONDS,
            asyncore_use_poll=True,
            expose_tracebacks=False,
            ident="reaper",
            log_socket_errors=False,
        )
        self._map: dict[int, Any] = {}
        dispatcher = _Dispatcher()
        dispatcher.set_thread_count(WORKER_THREADS)
        self._server = _Server(
            app,
            map=self._map,
            _sock=sock,
            dispatcher=dispatcher,
            adj=adj,
            bind_socket=False,
            sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()),
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # waitress warns at every task queued behind a busy worker: scrapes are not news.
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)

    @property
    def port(self) -> int:
        """The port listened on (the real one when ``listen`` asked for port 0)."""
        return int(self._server.effective_port)

    def start(self) -> None:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(target=self._serve, name="reaper-http", daemon=True)
        self._thread.start()
        log.info("http_listening", address=f"{self._server.effective_host}:{self.port}")

    def _serve(self) -> None:
        # Polled in short steps so that stop() is noticed within 0.1 s.
        while not self._stop.is_set() and self._map:
            wasyncore.loop(timeout=0.1, map=self._map, use_poll=True, count=1)
        wasyncore.close_all(self._map)

    def stop(self) -> None:
        """Stop serving and close the socket (a scrape in flight is cut)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        else:
            wasyncore.close_all(self._map)
        self._server.task_dispatcher.shutdown(cancel_pending=True, timeout=1)


def _best_family(host: str, port: int) -> tuple[socket.AddressFamily, Any]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr

"""The daemon's one HTTP port: ``/metrics``, ``/healthz`` and ``/readyz``.

An asyncio event loop accepts and reads every connection; h11 parses HTTP, so reaper parses
none itself. Only a complete request reaches a worker thread, which runs the WSGI app
(``/metrics`` is prometheus-client's own). The invariant: **the port answers**. Whatever any
number of clients does (connect and idle, trickle, pipeline, never read, churn, guess
passwords), a well-behaved scraper is answered within a second and the process's memory
stays within a few MiB of its baseline. reaper bounds:

- connections: past :data:`MAX_CONNECTIONS`, a new one closes a stalled one (in one stage
  for :data:`STALL_SECONDS`): idle keep-alive ones first, then those whose request has not
  arrived, then those whose answer is not read, the longest stalled first. A connection
  being answered, or busy with its exchange (a new one, a fresh probe), is never closed, so
  no crowd locks a scraper out and no scraper gets an empty reply. Past
  :data:`MAX_CONNECTIONS_HARD`, new ones wait in the kernel's backlog until one stalls or
  has waited a moment for its request;
- a request's arrival: its headers must arrive whole within :data:`READ_TIMEOUT_SECONDS` of its
  first byte (or of the connection), however slowly they trickle in;
- an answer's departure: an answer the client does not read for :data:`READ_TIMEOUT_SECONDS`
  closes the connection;
- pipelining: one request of a connection at a time; the next is parsed only once the answer
  to the previous one is in the kernel, which buffers at most :data:`SEND_BUFFER_BYTES`;
  requests read anew go before pipelined ones, and :data:`MAX_PIPELINED` in a row close the
  connection;
- an idle keep-alive connection: closed after :data:`IDLE_TIMEOUT_SECONDS`;
- CPU: a ``/metrics`` answer is reused for a moment, one render at a time
  (:class:`~reaper.daemon.answers.SharedRenders`): any number of scrapes costs one render;
- headers: at most :data:`MAX_HEADER_BYTES` in all and :data:`MAX_HEADER_COUNT` lines, else
  ``431``; a body: at most :data:`MAX_BODY_BYTES`, else ``413``.

With a web config file (``--web-config-file``, :mod:`reaper.daemon.webconfig`) every path
asks for HTTP basic auth against bcrypt hashes, at a bounded cost (:mod:`reaper.daemon.auth`),
and every answer carries the file's headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import socket
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from enum import IntEnum
from pathlib import Path
from typing import Any

import h11
import structlog

from reaper.config.values import split_listen
from reaper.daemon.answers import AUTHENTICATED, Reply, call_app, text_reply, wsgi_environ
from reaper.daemon.auth import BasicAuth, CheckQueue, Verdict
from reaper.daemon.webconfig import WebConfig
from reaper.errors import ConfigError

log = structlog.get_logger("reaper.http")

# Open connections at most. One scraper or two, the kubelet's probes, a person with curl: 64
# leaves room for all of them; when full, a new one closes another (see the module's text).
MAX_CONNECTIONS = 64
# Connections at most while the others are all busy with their exchange: past this, new
# ones wait in the kernel's backlog (answered late, never refused) until one stalls.
MAX_CONNECTIONS_HARD = 2 * MAX_CONNECTIONS
# How often accepting looks again for room when full, and how long a connection must have
# waited for its request to be closed then.
_FULL_POLL_SECONDS = 0.1
_FULL_STALL_SECONDS = 0.1
# A connection that has stayed this long in one stage (idle between requests, waiting for
# its request, sending its answer) is stalled, and may be closed for room. A client that
# connects, or asks again, has just left its last stage: curl, Prometheus and the kubelet
# send their request within milliseconds.
STALL_SECONDS = 1.0
# Connections waiting to be accepted by the kernel, as most servers keep.
ACCEPT_BACKLOG = 1024
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
# Threads that run complete requests (a scrape renders in milliseconds). bcrypt checks run
# in a thread of their own (reaper.daemon.auth), so these always serve scrapes.
WORKER_THREADS = 3
# Pipelined requests answered in a row (read with an earlier one, not awaited): the last one
# closes the connection. No scraper pipelines; a client that does reconnects for the rest.
MAX_PIPELINED = 16
# Bytes read from a connection at once: the most a pipelining client has waiting in reaper
# (the event loop reads at most twice this ahead).
RECV_BYTES = 8192
# The kernel's send buffer of each connection (SO_SNDBUF, inherited from the listener). An
# answer (~40 KB with the built-in sweeps) fits; a client that does not read stalls after one
# or two answers, instead of after the ~4 MiB Linux would buffer for it (a hundred renders of
# /metrics per pipelining client, each taking CPU from the scrapers).
SEND_BUFFER_BYTES = 64 * 1024


# -- the server ----------------------------------------------------------------------------------


class _Stage(IntEnum):
    """Where a connection is, in the order connections are closed to make room."""

    IDLE = 0  # between requests, nothing of the next one read
    ARRIVING = 1  # waiting for its request to arrive whole (a new connection too)
    SENDING = 2  # its answer not yet taken by the kernel
    ANSWERING = 3  # its request complete, being answered: never closed for room


class _Connection(asyncio.BufferedProtocol):
    """One connection: its stage, and its bytes. The kernel is read only while a request is
    awaited, :data:`RECV_BYTES` at a time, so a client that sends more waits in its own
    socket buffers, not in reaper's memory."""

    def __init__(self, port: _Port) -> None:
        self._port = port
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.client = ""
        self.stage = _Stage.ARRIVING
        self.pipelined = 0  # requests answered in a row from bytes read before each began
        self.since = self._loop.time()  # loop time the stage began
        self._data = b""
        self._ended = False
        self._readable: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.pause_reading()
        # Writes go through to the kernel before the next request is read (see _send).
        transport.set_write_buffer_limits(high=0)
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if peer else ""
        self._port.accept(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        # One buffer for every connection: the loop fills it and calls buffer_updated at
        # once, which copies the bytes out.
        return self._port.buffer

    def buffer_updated(self, nbytes: int) -> None:
        assert self.transport is not None
        self._data += self._port.buffer[:nbytes]
        self.transport.pause_reading()
        self._wake("_readable")

    def eof_received(self) -> bool:
        self._ended = True
        self._wake("_readable")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended = True
        self._wake("_readable")
        self._wake("_writable")

    def pause_writing(self) -> None:
        self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        self._wake("_writable")

    def _wake(self, name: str) -> None:
        waiter = getattr(self, name)
        setattr(self, name, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read(self) -> bytes:
        """The next bytes from the client (at most RECV_BYTES); b"" at its end."""
        assert self.transport is not None
        if not self._data and not self._ended:
            self._readable = self._loop.create_future()
            self.transport.resume_reading()
            await self._readable
        data, self._data = self._data, b""
        return data

    async def drained(self) -> None:
        """Wait until the kernel has taken everything written."""
        if self._writable is not None:
            await asyncio.shield(self._writable)
        else:  # not paused: nothing is waiting (a moment's yield, never a busy loop)
            await asyncio.sleep(0.01)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class _Workers:
    """:data:`WORKER_THREADS` threads that run the app, requests read anew first."""

    def __init__(self) -> None:
        self._threads = ThreadPoolExecutor(WORKER_THREADS, thread_name_prefix="reaper-http")
        self._free = WORKER_THREADS
        self._waiting: tuple[deque[asyncio.Future[None]], ...] = (deque(), deque())

    async def run(self, pipelined: bool, call: Callable[[], Reply]) -> Reply:
        loop = asyncio.get_running_loop()
        if self._free and not any(self._waiting):
            self._free -= 1
        else:
            turn: asyncio.Future[None] = loop.create_future()
            queue = self._waiting[pipelined]
            queue.append(turn)
            try:
                await turn
            except asyncio.CancelledError:
                if turn in queue:
                    queue.remove(turn)
                elif not turn.cancelled():
                    self._release()  # its place, given as it went
                raise
        # The place is freed when the call returns, even if the client went away.
        done = loop.run_in_executor(self._threads, call)
        done.add_done_callback(lambda _: self._release())
        return await asyncio.shield(done)

    def _release(self) -> None:
        for queue in self._waiting:
            while queue:
                turn = queue.popleft()
                if not turn.done():  # not cancelled as its client went away
                    turn.set_result(None)
                    return
        self._free += 1

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)


class _Closed(Exception):
    """The connection ends: closed by the client, timed out, or closed to make room."""


class _Port:
    """The event loop's side of the port: connections, their deadlines and their answers."""

    def __init__(self, app: Callable[..., Any], web_config: WebConfig | None) -> None:
        self._app = app
        self._web_config: WebConfig | None = None
        self._auth: CheckQueue | None = None
        self._headers: tuple[tuple[str, str], ...] = ()
        self.configure(web_config)
        self._workers = _Workers()
        self._connections: set[_Connection] = set()
        self.buffer = memoryview(bytearray(RECV_BYTES))
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.server_name = ("", 0)

    def configure(self, web_config: WebConfig | None) -> None:
        """Guard the port with ``web_config`` from now on (None: no authentication). An
        unchanged one keeps the passwords already verified."""
        if web_config == self._web_config:
            return
        if self._auth is not None:
            self._auth.close()
        self._web_config = web_config
        self._auth = CheckQueue(BasicAuth(web_config.basic_auth_users)) if web_config else None
        self._headers = web_config.headers if web_config else ()

    async def accept_all(self, listener: socket.socket) -> None:
        """Accept connections for ever. Past :data:`MAX_CONNECTIONS_HARD` new ones wait in
        the kernel's backlog until one closes or stalls (then it is closed for room)."""
        loop = asyncio.get_running_loop()
        while True:
            while len(self._connections) >= MAX_CONNECTIONS_HARD:
                most = MAX_CONNECTIONS_HARD - 1
                self._make_room(None, loop.time(), most)
                # No stalled one: one that has waited a moment for its request goes, so that
                # the backlog keeps moving (a crowd of new connections ahead of a scraper).
                self._make_room(None, loop.time(), most, _FULL_STALL_SECONDS)
                if len(self._connections) >= MAX_CONNECTIONS_HARD:
                    await asyncio.sleep(_FULL_POLL_SECONDS)
            accepted = asyncio.ensure_future(loop.sock_accept(listener))
            try:
                sock, _ = await asyncio.shield(accepted)
            except asyncio.CancelledError:  # the port stops: a socket accepted meanwhile closes
                accepted.add_done_callback(_close_accepted)
                accepted.cancel()
                raise
            except OSError as exc:  # out of file descriptors, for one: try again soon
                log.warning("http_accept_failed", error=str(exc))
                await asyncio.sleep(_FULL_POLL_SECONDS)
                continue
            try:
                await loop.connect_accepted_socket(lambda: _Connection(self), sock)
            except OSError:  # the client left at once
                sock.close()

    def accept(self, conn: _Connection) -> None:
        """Serve a new connection (its transport made)."""
        if self._closing:
            conn.abort()
            return
        self._connections.add(conn)
        self._make_room(conn, conn.since, MAX_CONNECTIONS)
        task = asyncio.get_running_loop().create_task(self._serve(conn))
        self._tasks.add(task)  # the loop holds its tasks weakly
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: _Connection) -> None:
        """One connection, from accept to close."""
        loop = asyncio.get_running_loop()
        # It waits for its request from now: a busy loop's delay is not the client's.
        conn.since = loop.time()
        h = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        try:
            while True:
                reply, method = await self._exchange(conn, h)
                await self._send(conn, h, reply, method)
                if h.our_state is not h11.DONE or h.their_state is not h11.DONE:
                    break
                h.start_next_cycle()
                conn.stage, conn.since = _Stage.IDLE, loop.time()
        except (_Closed, OSError, h11.LocalProtocolError, asyncio.CancelledError):
            pass  # the client left, timed out or was closed for room; or the port stops
        except Exception:  # a bug: it ends this connection, never the port
            log.exception("http_connection_failed")
        finally:
            self._connections.discard(conn)
            conn.abort()

    async def _exchange(self, conn: _Connection, h: h11.Connection) -> tuple[Reply, bytes]:
        """Read one request and answer it: (the reply, the request's method)."""
        try:
            request, pipelined = await self._read_request(conn, h)
            conn.pipelined = conn.pipelined + 1 if pipelined else 0
            if pipelined:
                # Read before this exchange began: it was never awaited, so the event loop
                # turns once before it is answered, and every other connection has its turn.
                await asyncio.sleep(0)
        except h11.RemoteProtocolError as exc:
            return text_reply(
                exc.error_status_hint, _ERRORS.get(exc.error_status_hint, "bad request")
            ), b""
        method = request.method
        if len(request.headers) > MAX_HEADER_COUNT:
            return text_reply(431, f"more than {MAX_HEADER_COUNT} header lines"), method
        environ = wsgi_environ(request, conn.client, self.server_name)
        if self._auth is not None:
            header = str(environ.get("HTTP_AUTHORIZATION", ""))
            verdict = await self._auth.verify(header, conn.client)
            if verdict is Verdict.BUSY:
                return text_reply(503, "busy checking other passwords; retry", _RETRY), method
            if verdict is Verdict.DENY:
                return text_reply(401, "unauthorized", _CHALLENGE), method
            environ[AUTHENTICATED] = True
        return await self._workers.run(pipelined, lambda: call_app(self._app, environ)), method

    async def _read_request(self, conn: _Connection, h: h11.Connection) -> tuple[h11.Request, bool]:
        """The next request, whole (its body read and at most MAX_BODY_BYTES), and whether it
        was pipelined (in the buffer before this exchange began)."""
        loop = asyncio.get_running_loop()
        request: h11.Request | None = None
        pipelined = True
        size = 0
        while True:
            event = h.next_event()
            if event is h11.NEED_DATA:
                pipelined = False
                if h.they_are_waiting_for_100_continue and conn.transport is not None:
                    continued = h11.InformationalResponse(status_code=100, headers=[])
                    conn.transport.write(h.send(continued) or b"")
                limit = IDLE_TIMEOUT_SECONDS if conn.stage is _Stage.IDLE else READ_TIMEOUT_SECONDS
                try:
                    async with asyncio.timeout_at(conn.since + limit):
                        data = await conn.read()
                except TimeoutError:
                    raise _Closed from None
                if conn.stage is _Stage.IDLE and data:
                    conn.stage, conn.since = _Stage.ARRIVING, loop.time()
                h.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
                length = _content_length(event)
                if length is not None and length > MAX_BODY_BYTES:
                    raise h11.RemoteProtocolError("body too large", error_status_hint=413)
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_BODY_BYTES:
                    raise h11.RemoteProtocolError("body too large", error_status_hint=413)
            elif isinstance(event, h11.EndOfMessage) and request is not None:
                conn.stage, conn.since = _Stage.ANSWERING, loop.time()
                return request, pipelined
            else:  # ConnectionClosed, or PAUSED (cannot happen: one request at a time)
                raise _Closed

    async def _send(
        self,
        conn: _Connection,
        h: h11.Connection,
        reply: Reply,
        method: bytes,
    ) -> None:
        """Write ``reply`` and wait until the kernel has taken it all; close the connection
        when the client reads none of it for :data:`READ_TIMEOUT_SECONDS`."""
        loop = asyncio.get_running_loop()
        conn.stage, conn.since = _Stage.SENDING, loop.time()
        headers = [
            *reply.headers,
            *self._headers,
            ("Date", email.utils.formatdate(usegmt=True)),
        ]
        if (reply.status >= 400 and reply.status != 404) or conn.pipelined >= MAX_PIPELINED:
            headers.append(("Connection", "close"))
        data = h.send(h11.Response(status_code=reply.status, headers=headers, reason=reply.reason))
        if method != b"HEAD" and reply.body:
            data += h.send(h11.Data(data=reply.body))
        data += h.send(h11.EndOfMessage())
        transport = conn.transport
        if transport is None or transport.is_closing():  # reset, or closed for room
            raise _Closed
        transport.write(data)
        left = transport.get_write_buffer_size()
        while left:
            try:
                async with asyncio.timeout(READ_TIMEOUT_SECONDS):
                    await conn.drained()
            except TimeoutError:
                if transport.get_write_buffer_size() >= left:
                    raise _Closed from None
            if transport.is_closing():
                raise _Closed
            left = transport.get_write_buffer_size()

    def _make_room(
        self, new: _Connection | None, now: float, most: int, stall: float = STALL_SECONDS
    ) -> None:
        """Close stalled connections (:data:`STALL_SECONDS` in one stage, not being
        answered) while more than ``most`` are open: idle ones first, then those whose
        request has not arrived, then those whose answer is not read, the longest stalled
        first."""
        while len(self._connections) > most:
            stalled = [
                c
                for c in self._connections
                if c is not new and c.stage is not _Stage.ANSWERING and now - c.since > stall
            ]
            if not stalled:
                return  # every other one is busy with its exchange
            victim = min(stalled, key=lambda c: (c.stage, c.since))
            self._connections.discard(victim)
            victim.abort()

    def abort_all(self) -> None:
        """Close every connection; one accepted from now on closes as it starts."""
        self._closing = True
        for conn in self._connections:
            conn.abort()
        for task in self._tasks:
            task.cancel()

    def close(self) -> None:
        self._workers.close()
        if self._auth is not None:
            self._auth.close()


_ERRORS = {413: "request body too large", 431: "request header fields too large"}
_RETRY = ("Retry-After", "1")
_CHALLENGE = ("WWW-Authenticate", 'Basic realm="reaper"')


def _close_accepted(accepted: asyncio.Future[tuple[socket.socket, Any]]) -> None:
    if not accepted.cancelled() and accepted.exception() is None:
        accepted.result()[0].close()


def _content_length(request: h11.Request) -> int | None:
    for name, value in request.headers:
        if name == b"content-length":
            return int(value)  # h11 has checked it is a number
    return None


class HttpServer:
    """The port, served from a daemon thread.

    Args:
        listen: ``HOST:PORT``, ``:PORT`` (every interface) or ``[IPv6]:PORT``; port 0 picks
            a free port (tests), see :attr:`port`.
        app: the WSGI app (:func:`make_app`).
        web_config: a web config file (basic auth, headers); None: no authentication.

    Raises:
        ConfigError: the address cannot be bound (in use, not an address of this host), or
            the web config file is invalid.
    """

    def __init__(
        self, listen: str, app: Callable[..., Any], web_config: Path | None = None
    ) -> None:
        config = WebConfig.load(web_config) if web_config is not None else None
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
            sock.listen(ACCEPT_BACKLOG)
            sock.setblocking(False)
        except OSError as exc:
            raise ConfigError(
                f"--listen {listen}: cannot listen there ({exc.strerror or exc}); choose a free "
                "port or an address of this host"
            ) from None
        self._sock = sock
        self._port = _Port(app, config)
        self._port.server_name = (str(sock.getsockname()[0]), int(sock.getsockname()[1]))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def port(self) -> int:
        """The port listened on (the real one when ``listen`` asked for port 0)."""
        return int(self._sock.getsockname()[1])

    def start(self) -> None:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(target=self._serve, name="reaper-http", daemon=True)
        self._thread.start()
        self._ready.wait(5)
        log.info("http_listening", address=f"{self._port.server_name[0]}:{self.port}")

    def _serve(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        accepting = self._loop.create_task(self._port.accept_all(self._sock))
        self._ready.set()
        try:
            await self._stopped.wait()
        finally:
            accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await accepting
            self._port.abort_all()
            # Connections being set up close as they start; then the aborted sockets close.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 2.0
            while (others := asyncio.all_tasks() - {asyncio.current_task()}) and (
                left := deadline - loop.time()
            ) > 0:
                await asyncio.wait(others, timeout=left)
            for _ in range(2):
                await asyncio.sleep(0)

    def configure(self, web_config: WebConfig | None) -> None:
        """Guard the port with ``web_config`` from now on (a reload); None: no authentication."""
        loop = self._loop
        if loop is None or not self._thread or not self._thread.is_alive():
            self._port.configure(web_config)
            return
        with contextlib.suppress(RuntimeError):  # the loop has ended already
            loop.call_soon_threadsafe(self._port.configure, web_config)

    def stop(self) -> None:
        """Stop serving and close the socket (a scrape in flight is cut)."""
        if self._loop is not None and self._stopped is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._sock.close()
        self._port.close()


def _best_family(host: str, port: int) -> tuple[socket.AddressFamily, Any]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr

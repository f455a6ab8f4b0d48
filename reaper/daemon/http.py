"""The daemon's one HTTP port: ``/metrics``, ``/healthz`` and ``/readyz``.

``/metrics`` is prometheus-client's own WSGI app, served by waitress, so reaper parses no HTTP
itself. waitress reads every request on one event loop and hands only complete requests to
its worker threads: a client that sends slowly, or never finishes, costs a buffer of at most
:data:`MAX_HEADER_BYTES`, never a thread. On top of waitress's own limits reaper bounds:

- connections: at most :data:`MAX_CONNECTIONS`; when full, the connection that has waited
  longest for its request to arrive is closed to admit the new one, so slow clients can never
  lock a scraper out;
- a request's arrival: its headers must arrive whole within :data:`READ_TIMEOUT_SECONDS` of its
  first byte (or of the connection), however slowly they trickle in;
- an idle keep-alive connection: closed after :data:`IDLE_TIMEOUT_SECONDS`;
- headers: at most :data:`MAX_HEADER_BYTES` in all and :data:`MAX_HEADER_COUNT` lines, else
  ``431``; a body: at most :data:`MAX_BODY_BYTES`, else ``413``.

The health endpoints ask callables for their answer:

- ``/healthz``: the process and its scheduler are alive (200 ``ok``, else 503 and why);
- ``/readyz``: the database answered recently and the tables reaper sweeps exist.

With a web config file (``--web-config-file``, the format of Prometheus exporters'
exporter-toolkit) every path asks for HTTP basic auth against bcrypt hashes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
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

from reaper.config.values import split_listen
from reaper.errors import ConfigError

log = structlog.get_logger("reaper.http")

# A check answers (ok, reason): reason is the one line shown with a 503.
Check = Callable[[], tuple[bool, str]]
StartResponse = Callable[..., Any]

_INDEX = b"reaper: /metrics (Prometheus), /healthz (alive), /readyz (database answers)\n"

# Open connections at most. One scraper or two, the kubelet's probes, a person with curl: 64
# leaves room for all of them; the evicted are those that never finished a request.
MAX_CONNECTIONS = 64
# A request's headers in all. Prometheus sends ~300 bytes, curl ~100; 16 KiB is 50x that.
MAX_HEADER_BYTES = 16 * 1024
# Header lines of a request. Prometheus sends 6, curl 3.
MAX_HEADER_COUNT = 64
# No endpoint takes a body.
MAX_BODY_BYTES = 1024
# A request must arrive whole within this long of its first byte (slowloris).
READ_TIMEOUT_SECONDS = 10.0
# A keep-alive connection with no request for this long is closed (Prometheus reconnects).
IDLE_TIMEOUT_SECONDS = 60.0
# Threads that run complete requests (a scrape renders in milliseconds).
WORKER_THREADS = 2
# How often the event loop looks for connections past their deadlines.
_MAINTENANCE_SECONDS = 1.0


def make_app(registry: CollectorRegistry, healthz: Check, readyz: Check) -> Callable[..., Any]:
    """The WSGI app: ``/metrics`` from ``registry``, ``/healthz`` and ``/readyz`` from the
    checks (200 ``ok`` or 503 with the reason, text/plain), ``/`` a one-line index, else 404."""
    metrics_app = make_wsgi_app(registry)

    def text(start: StartResponse, status: str, body: str) -> Iterable[bytes]:
        data = body.encode()
        start(status, [("Content-Type", "text/plain; charset=utf-8"),
                       ("Content-Length", str(len(data)))])
        return [data]

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            result: Iterable[bytes] = metrics_app(environ, start_response)
            return result
        if path in ("/healthz", "/readyz"):
            ok, reason = (healthz if path == "/healthz" else readyz)()
            if ok:
                return text(start_response, "200 OK", "ok\n")
            return text(start_response, "503 Service Unavailable", f"not ready: {reason}\n"
                        if path == "/readyz" else f"unhealthy: {reason}\n")
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [_INDEX]
        return text(start_response, "404 Not Found", "not found: try /metrics, /healthz, /readyz\n")

    return app


# -- web config (exporter-toolkit format) ------------------------------------------------------


@dataclass(frozen=True)
class WebConfig:
    """A web config file's settings: ``basic_auth_users`` (name -> bcrypt hash).

    TLS (``tls_server_config``) is refused with a one-line error: terminate TLS in front of
    the port (a sidecar or the service mesh) instead.
    """

    basic_auth_users: Mapping[str, bytes] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> WebConfig:
        """Read and check a web config file (YAML).

        Raises:
            ConfigError: the file cannot be read, is not YAML of the expected shape, names
                TLS, or holds a hash that is not bcrypt; one line naming the fix.
        """
        import yaml

        where = f"--web-config-file {path}"
        try:
            text = path.read_text(encoding="utf-8")
            doc = yaml.safe_load(text) if text.strip() else {}
        except OSError as exc:
            raise ConfigError(f"{where} cannot be read: {exc.strerror or exc}") from None
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
        users = doc.get("basic_auth_users") or {}
        if not isinstance(users, dict):
            raise ConfigError(f"{where}: basic_auth_users must map user names to bcrypt hashes")
        out: dict[str, bytes] = {}
        for name, hashed in users.items():
            if not isinstance(name, str) or not isinstance(hashed, str) or \
                    not hashed.startswith(("$2a$", "$2b$", "$2y$")):
                raise ConfigError(
                    f"{where}: basic_auth_users: the value for {str(name)[:40]!r} is not a "
                    "bcrypt hash; make one with: htpasswd -nBC 10 '' | tr -d ':\\n'"
                )
            out[name] = hashed.encode()
        return cls(out)


def basic_auth(app: Callable[..., Any], users: Mapping[str, bytes]) -> Callable[..., Any]:
    """``app`` behind HTTP basic auth: 401 unless the request names a user of ``users`` with
    the password whose bcrypt hash it holds. A password checked once is remembered (as a
    SHA-256 digest, never in clear) so that scrapes do not pay bcrypt's ~0.1 s each."""
    import bcrypt

    verified: dict[str, bytes] = {}
    lock = threading.Lock()

    def deny(start_response: StartResponse) -> Iterable[bytes]:
        body = b"unauthorized\n"
        start_response("401 Unauthorized", [
            ("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))),
            ("WWW-Authenticate", 'Basic realm="reaper"'),
        ])
        return [body]

    def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        header = str(environ.get("HTTP_AUTHORIZATION", ""))
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic":
            return deny(start_response)
        try:
            user, sep, password = base64.b64decode(token, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return deny(start_response)
        hashed = users.get(user)
        if not sep or hashed is None:
            return deny(start_response)
        digest = hashlib.sha256(hashed + b"\0" + password.encode()).digest()
        with lock:
            known = verified.get(user)
        if known is None or not hmac.compare_digest(known, digest):
            if not bcrypt.checkpw(password.encode(), hashed):
                return deny(start_response)
            with lock:
                verified[user] = digest
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
            self.error = RequestHeaderFieldsTooLarge(
                f"more than {MAX_HEADER_COUNT} header lines"
            )
            return
        super().parse_header(header_plus)


class _Channel(HTTPChannel):  # type: ignore[misc]
    """A connection that remembers since when it waits for a request to arrive whole."""

    parser_class = _Parser

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A new connection waits for its first request from the moment it is accepted.
        self.waiting_since: float | None = self.creation_time

    def received(self, data: bytes) -> bool:
        if data and self.waiting_since is None:
            self.waiting_since = time.time()
        result = bool(super().received(data))
        if self.request is None:  # nothing half-read: the request (if any) arrived whole
            self.waiting_since = None
        return result


class _Server(TcpWSGIServer):  # type: ignore[misc]
    """waitress's server, plus a deadline on a request's arrival and eviction when full."""

    channel_class = _Channel

    def maintenance(self, now: float) -> None:
        super().maintenance(now)
        for channel in list(self.active_channels.values()):
            since = channel.waiting_since
            if since is not None and not channel.requests and now - since > READ_TIMEOUT_SECONDS:
                channel.will_close = True

    def readable(self) -> bool:
        # The map also holds this listener and waitress's trigger.
        excess = len(self._map) - self.adj.connection_limit + 1
        if excess > 0:
            waiting = sorted(
                (c for c in self.active_channels.values()
                 if c.waiting_since is not None and not c.requests and not c.will_close),
                key=lambda c: c.waiting_since,
            )
            doomed = sum(1 for c in self.active_channels.values() if c.will_close)
            for channel in waiting[: max(0, excess - doomed)]:
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
            config = WebConfig.load(web_config)
            if config.basic_auth_users:
                app = basic_auth(app, config.basic_auth_users)
        host, port = split_listen(listen)
        bind_host = host or "0.0.0.0"  # ":9465": every IPv4 interface, as Prometheus expects
        try:
            family, addr = _best_family(bind_host, port)
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
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
            cleanup_interval=_MAINTENANCE_SECONDS,
            asyncore_use_poll=True,
            expose_tracebacks=False,
            ident="reaper",
            log_socket_errors=False,
        )
        self._map: dict[int, Any] = {}
        dispatcher = ThreadedTaskDispatcher()
        dispatcher.set_thread_count(WORKER_THREADS)
        self._server = _Server(
            app, map=self._map, _sock=sock, dispatcher=dispatcher, adj=adj, bind_socket=False,
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

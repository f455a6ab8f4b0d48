"""The daemon's one HTTP port: ``/metrics``, ``/healthz`` and ``/readyz``.

``/metrics`` is prometheus-client's own WSGI app; the server is the one prometheus-client's
``start_wsgi_server`` builds (wsgiref with ``ThreadingWSGIServer``, a thread per request), so
reaper parses no HTTP itself. The health endpoints ask callables for their answer:

- ``/healthz``: the process and its scheduler are alive (200 ``ok``, else 503 and why);
- ``/readyz``: the database answered recently and the tables reaper sweeps exist.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import structlog
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from reaper.errors import ConfigError
from reaper.settings import split_listen

log = structlog.get_logger("reaper.http")

# A check answers (ok, reason): reason is the one line shown with a 503.
Check = Callable[[], tuple[bool, str]]
StartResponse = Callable[..., Any]

_INDEX = b"reaper: /metrics (Prometheus), /healthz (alive), /readyz (database answers)\n"


class _QuietHandler(WSGIRequestHandler):
    """Requests are not logged line by line (Prometheus scrapes every few seconds)."""

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing."""


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


class HttpServer:
    """The port, served from a daemon thread.

    Args:
        listen: ``HOST:PORT``, ``:PORT`` (every interface) or ``[IPv6]:PORT``; port 0 picks
            a free port (tests), see :attr:`port`.
        app: the WSGI app (:func:`make_app`).

    Raises:
        ConfigError: the address cannot be bound (in use, not an address of this host).
    """

    def __init__(self, listen: str, app: Callable[..., Any]) -> None:
        host, port = split_listen(listen)
        bind_host = host or "0.0.0.0"  # ":9465": every IPv4 interface, as Prometheus expects

        class Server(ThreadingWSGIServer):
            pass

        try:
            # prometheus-client's own choice of address family (IPv6 when the host is one).
            family, bind_host = _best_family(bind_host, port)
            Server.address_family = family
            self._server = make_server(bind_host, port, app, Server, handler_class=_QuietHandler)
        except OSError as exc:
            raise ConfigError(
                f"--listen {listen}: cannot listen there ({exc.strerror or exc}); choose a free "
                "port or an address of this host"
            ) from None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port listened on (the real one when ``listen`` asked for port 0)."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Serve in a daemon thread."""
        # serve_forever checks for shutdown every poll_interval: 0.1 s keeps SIGTERM-to-exit short.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
            name="reaper-http", daemon=True,
        )
        self._thread.start()
        host = self._server.server_address[0]
        log.info("http_listening", address=f"{host!s}:{self.port}")

    def stop(self) -> None:
        """Stop serving and close the socket (a scrape in flight is cut)."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()


def _best_family(host: str, port: int) -> tuple[socket.AddressFamily, str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    return family, str(sockaddr[0])

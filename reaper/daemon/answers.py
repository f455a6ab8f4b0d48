"""What the HTTP port answers: the WSGI app of ``/metrics``, ``/healthz`` and ``/readyz``,
and a WSGI app's answer gathered whole in a worker thread.

The health endpoints ask callables for their answer:

- ``/healthz``: the process and its scheduler are alive (200 ``ok``, else 503 and why);
- ``/readyz``: the database answered recently and the tables reaper sweeps exist (503 with
  the class of the reason; the reason itself only to a request that passed basic auth).
"""

from __future__ import annotations

import io
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import structlog
from prometheus_client import CollectorRegistry, make_wsgi_app

if TYPE_CHECKING:
    from h11 import Request

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
# A /metrics answer is served again for this long (SharedRenders): a burst of scrapes costs
# one render. Prometheus scrapes every 15 s or more; two servers of an HA pair may share one.
METRICS_REUSE_SECONDS = 0.2
# Kinds of /metrics answers kept (by method, query, Accept, Accept-Encoding): Prometheus
# asks one or two; past this the oldest is forgotten.
MAX_METRICS_KINDS = 8


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


@dataclass(frozen=True)
class Reply:
    """An answer: status, reason, headers, body."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


def text_reply(status: int, text: str, *headers: tuple[str, str]) -> Reply:
    """A one-line text/plain answer."""
    body = f"{text}\n".encode()
    return Reply(
        status,
        REASONS.get(status, ""),
        (
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
            *headers,
        ),
        body,
    )


REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def call_app(app: Callable[..., Any], environ: dict[str, Any]) -> Reply:
    """Run the WSGI app (in a worker thread) and gather its answer."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started[:] = [status, headers]
        return lambda data: None

    try:
        result = app(environ, start_response)
        try:
            body = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
    except Exception:
        log.exception("http_app_failed", path=environ.get("PATH_INFO"))
        return text_reply(500, "internal error")
    code, _, reason = started[0].partition(" ")
    headers = tuple(
        (k, v) for k, v in started[1] if k.lower() not in ("content-length", "connection")
    )
    return Reply(int(code), reason, (*headers, ("Content-Length", str(len(body)))), body)


def wsgi_environ(request: Request, client: str, server: tuple[str, int]) -> dict[str, Any]:
    """The WSGI environ of a request parsed by h11 (PEP 3333), from ``client``."""
    target = request.target.decode("latin-1")
    if not target.startswith("/"):  # absolute-form (http://host/path) or "*"
        target = "/" + target.partition("://")[2].partition("/")[2]
    path, _, query = target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method.decode("latin-1"),
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote(path, encoding="latin-1"),
        "QUERY_STRING": query,
        "SERVER_NAME": server[0],
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": "HTTP/" + request.http_version.decode("latin-1"),
        "REMOTE_ADDR": client,
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    for name, value in request.headers:
        key = name.decode("latin-1").upper().replace("-", "_")
        if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            key = "HTTP_" + key
        text = value.decode("latin-1")
        environ[key] = f"{environ[key]},{text}" if key in environ else text
    return environ

"""Helpers that the test_http_port.py files of several layers share."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from reaper.daemon.answers import make_app
from reaper.daemon.http import HttpServer


def _server(web_config: Path | None = None) -> HttpServer:
    app = make_app(CollectorRegistry(), lambda: (True, ""), lambda: (True, "", ""))
    server = HttpServer("127.0.0.1:0", app, web_config)
    server.start()
    return server

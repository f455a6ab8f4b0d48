"""Fixtures and markers for every layer.

The layer is the folder: ``tests/unit/`` (no PostgreSQL, no subprocess, no network, no
sleeping), ``tests/db/`` (a real PostgreSQL, in-process) and ``tests/process/`` (reaper
processes, clusters of their own, network namespaces, PgBouncer, tools). Each test gets its
layer's marker (``-m unit``, ``-m db``, ``-m process``), so no test declares it.

The server is ``REAPER_TEST_DSN`` if set, else testcontainers' PostgreSQL when Docker
answers, else an embedded pgserver (reaper.dev.devserver). One template database holds the
reference schema. ``dsn`` is one database shared by the whole session, a copy of the
template: the swept tables are emptied before each test, and a test that leaves its schema,
grants or settings changed fails, asked to mark itself ``@pytest.mark.fresh_db``. Such a test
gets a fresh ``CREATE DATABASE ... TEMPLATE`` copy of its own, dropped afterwards.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from reaper.config.settings import Settings, build_settings
from reaper.db import ConnectionSettings, Database
from reaper.dev import devserver
from tests.support import TEST_DEFAULTS
from tests.support.daemon import kill_leftovers
from tests.support.databases import empty_swept_tables, fingerprint_changes, schema_fingerprint

LAYERS = ("unit", "db", "process")
DB_FIXTURES = {"pg_server", "template_db", "shared_db", "dsn", "conn", "database"}
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.path)).relative_to(HERE).parts
        layer = parts[0] if len(parts) > 1 else None
        if layer not in LAYERS:
            raise pytest.UsageError(
                f"{item.nodeid}: a test lives under tests/unit, tests/db or tests/process"
            )
        item.add_marker(getattr(pytest.mark, layer))
        callspec = getattr(item, "callspec", None)
        fixtures = set(getattr(item, "fixturenames", ())) - set(callspec.params if callspec else ())
        if layer == "unit" and DB_FIXTURES & fixtures:
            raise pytest.UsageError(
                f"{item.nodeid}: a unit test needs no database; move it under tests/db"
            )


@pytest.fixture(autouse=True)
def _no_reaper_left() -> Iterator[None]:
    """After each test, SIGKILL every reaper process it started (start_reaper) that still
    runs: a failed test's."""
    yield
    kill_leftovers()


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """After each test, the root logger's handlers and level as they were before it: a test
    that configures reaper's logging (an in-process command) binds a handler to that test's
    captured stderr, which is closed once the test ends; a later test's daemon thread that
    logged through it printed "--- Logging error ---". structlog's configuration too: a
    later test that reads structlog's own output (capsys) found it routed to the root
    logger by an earlier in-process command.

    """
    import structlog

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configured, config = structlog.is_configured(), structlog.get_config()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    if configured:
        structlog.configure(**config)
    else:
        structlog.reset_defaults()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """DSN of the server's maintenance database."""
    with devserver.server("REAPER_TEST_DSN") as dsn:
        yield dsn


def _unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="session")
def template_db(pg_server: str) -> Iterator[str]:
    """Name of a database holding the reference schema and indexes, for TEMPLATE copies."""
    name = _unique("reaper_tmpl")
    dsn = devserver.create_database(pg_server, name)
    devserver.load_schema(dsn)
    yield name
    devserver.drop_database(dsn)


class SharedDatabase:
    """The session's database (a copy of the template) and the fingerprint of its schema."""

    def __init__(self, pg_server: str, template: str) -> None:
        self._server, self._template = pg_server, template
        self.dsn = ""
        self.fingerprint = ""
        self.recreate()

    def recreate(self) -> None:
        if self.dsn:
            devserver.drop_database(self.dsn)
        self.dsn = devserver.create_database(
            self._server, _unique("reaper_shared"), template=self._template
        )
        self.fingerprint = schema_fingerprint(self.dsn)


@pytest.fixture(scope="session")
def shared_db(pg_server: str, template_db: str) -> Iterator[SharedDatabase]:
    db = SharedDatabase(pg_server, template_db)
    yield db
    devserver.drop_database(db.dsn)


@pytest.fixture
def dsn(request: pytest.FixtureRequest, pg_server: str, template_db: str) -> Iterator[str]:
    """DSN of a database with the reference schema and empty swept tables.

    The session's shared database, unless the test is marked ``fresh_db``: then a fresh copy
    of the template, dropped after the test. A test on the shared database must leave its
    schema, grants and settings as it found them (rows are emptied before each test); one
    that does not fails and the shared database is made again."""
    if request.node.get_closest_marker("fresh_db"):
        fresh = devserver.create_database(pg_server, template=template_db)
        yield fresh
        devserver.drop_database(fresh)
        return
    shared: SharedDatabase = request.getfixturevalue("shared_db")
    empty_swept_tables(shared.dsn)
    yield shared.dsn
    after = schema_fingerprint(shared.dsn)
    if after != shared.fingerprint:
        changes = fingerprint_changes(shared.fingerprint, after)
        shared.recreate()
        pytest.fail(
            "this test changed the shared database's schema, grants or settings"
            f" ({', '.join(changes[:5])}): mark it @pytest.mark.fresh_db",
            pytrace=False,
        )


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection for seeding and checking (the test's own, not reaper's)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


@pytest.fixture
def make_settings(dsn: str) -> Callable[..., Settings]:
    """Build Settings for the test database: ``make_settings(batch_size=100, ...)``."""

    def make(**values: Any) -> Settings:
        # Engine tests empty whole tables on purpose: the full-table interlock is off unless a
        # test sets it (tests/db/engine/test_safety_interlock.py does, through the real
        # command). The live-traffic pacer is off too: the test's own connection, seeding a
        # moment before, is live traffic to it, and would shorten the batches whose sizes a
        # test asserts (the pacing tests test the pacer).
        return build_settings({"dsn": dsn, **TEST_DEFAULTS, **values})

    return make


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


@pytest.fixture
def database(settings: Settings) -> Iterator[Database]:
    db = Database(
        ConnectionSettings(
            dsn=settings.dsn or "",
            statement_timeout=settings.statement_timeout,
            lock_timeout=settings.lock_timeout,
            idle_in_transaction_session_timeout=settings.idle_in_transaction_session_timeout,
        ),
    )
    with db:
        yield db


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()

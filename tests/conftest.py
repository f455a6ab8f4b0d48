"""Fixtures: a real PostgreSQL, never a mock.

The server is ``REAPER_TEST_DSN`` if set, else testcontainers' PostgreSQL when Docker
answers, else an embedded pgserver (reaper.dev.devserver). One template database holds the
reference schema; every test that needs isolation gets a fresh ``CREATE DATABASE ...
TEMPLATE`` copy, dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from reaper.config.settings import Settings, build_settings
from reaper.db import ConnectionSettings, Database
from reaper.dev import devserver
from tests.support import TEST_DEFAULTS

DB_FIXTURES = {"pg_server", "template_db", "dsn", "conn", "database"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if DB_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.db)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """DSN of the server's maintenance database."""
    with devserver.server("REAPER_TEST_DSN") as dsn:
        yield dsn


@pytest.fixture(scope="session")
def template_db(pg_server: str) -> Iterator[str]:
    """Name of a database holding the reference schema and indexes, for TEMPLATE copies."""
    name = f"reaper_tmpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    dsn = devserver.create_database(pg_server, name)
    devserver.load_schema(dsn)
    yield name
    devserver.drop_database(dsn)


@pytest.fixture
def dsn(pg_server: str, template_db: str) -> Iterator[str]:
    """DSN of a fresh database with the reference schema, dropped after the test."""
    db = devserver.create_database(pg_server, template=template_db)
    yield db
    devserver.drop_database(db)


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
        # test sets it (tests/test_safety_interlock.py does, through the real command). The
        # live-traffic pacer is off too: the test's own connection, seeding a moment before,
        # is live traffic to it, and would shorten the batches whose sizes a test asserts
        # (tests/test_pacing.py and tests/test_pacing_db.py test the pacer).
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

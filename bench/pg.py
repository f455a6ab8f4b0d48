"""The benchmark's side of the database: seed databases built once, cloned per variant.

Every variant of a scenario starts from the same bytes: the scenario's rows are seeded once
into a template database (tables, then rows, then the sweeps' indexes, then ``VACUUM (FREEZE,
ANALYZE)`` so that no variant pays for hint bits or a first analyze), and each variant runs on
a ``CREATE DATABASE ... TEMPLATE ... STRATEGY FILE_COPY`` copy of it (a file copy: about a
second per GiB here), after a CHECKPOINT, so that each starts with the same full-page-write
debt.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from reaper import sqltext
from reaper.db import table_identifier
from reaper.dev import devserver
from reaper.sqltext.names import TableName

SQL_DIR = Path(__file__).with_name("sql")
# The comment a template database gets once its seeding finished (Server.seed, --reuse).
SEEDED = "reaper bench: seeded"


@functools.cache
def bench_sql(name: str) -> str:
    """The text of ``bench/sql/<name>.sql``, comments removed."""
    return sqltext.strip_comments((SQL_DIR / f"{name}.sql").read_text("utf-8"))


def compose(
    name: str, table: str | TableName, predicate: str | sql.Composable = "TRUE", key: str = "id"
) -> sql.Composed:
    """A bench statement with ``{table}``, ``{predicate}`` (bench text, or a sweep's composed
    predicate) and ``{key}`` filled in."""
    where = sql.SQL(predicate) if isinstance(predicate, str) else predicate
    return sql.SQL(bench_sql(name)).format(
        table=table_identifier(TableName.parse(table)), predicate=where, key=sql.Identifier(key)
    )


def connect(dsn: str) -> psycopg.Connection[Any]:
    """An autocommit connection with reaper's session settings that matter for speed
    (``synchronous_commit=off``), so that variants a and b pay what reaper pays."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SET synchronous_commit = off")
    conn.execute("SET statement_timeout = 0")
    return conn


def backend_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a server process, from /proc (None when not readable:
    a remote server)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """The PostgreSQL server the benchmarks run on (``dsn``: its maintenance database)."""

    def __init__(self, dsn: str, reuse: bool = False) -> None:
        self.dsn = dsn
        self.reuse = reuse
        self.prefix = (
            "reaper_bench" if reuse else f"reaper_bench_{os.getpid()}_{uuid.uuid4().hex[:4]}"
        )
        self._made: list[str] = []

    def dsn_of(self, name: str) -> str:
        return devserver.with_dbname(self.dsn, name)

    def admin(self, statement: str | sql.Composed) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(statement)

    def seed(self, label: str, fill: Callable[[psycopg.Connection[Any]], None]) -> str:
        """Create a template database ``label``: schema, ``fill(conn)``, indexes, vacuum.

        Returns the database's name. Indexes are built after the rows (5x faster than
        inserting into indexed tables here).
        """
        name = f"{self.prefix}_{label}"
        if self.reuse and self.seeded(name):
            return name
        self.drop(name)
        self.admin(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        if not self.reuse:
            self._made.append(name)
        with psycopg.connect(self.dsn_of(name), autocommit=True) as conn:
            conn.execute("SET synchronous_commit = off")
            conn.execute("SET maintenance_work_mem = '256MB'")
            for stmt in sqltext.statements("schema.sql"):
                conn.execute(sql.SQL(stmt))  # type: ignore[arg-type,unused-ignore]
            fill(conn)
            for stmt in sqltext.statements("indexes.sql"):
                conn.execute(sql.SQL(stmt))  # type: ignore[arg-type,unused-ignore]
            conn.execute("VACUUM (FREEZE, ANALYZE)")
        # Only now may --reuse take it: a seed that was stopped half-way is made again.
        self.admin(
            sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                sql.Identifier(name), sql.Literal(SEEDED)
            )
        )
        return name

    @contextmanager
    def clone(self, template: str) -> Iterator[str]:
        """A fresh copy of ``template``, checkpointed; yields its DSN, dropped afterwards."""
        name = f"{template}_c"
        self.drop(name)
        self.admin(
            sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
        self._made.append(name)
        self.admin("CHECKPOINT")
        try:
            yield self.dsn_of(name)
        finally:
            self.drop(name)

    def seeded(self, name: str) -> bool:
        """Whether template ``name`` exists and its seeding finished (:meth:`seed`)."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return (
                conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s "
                    "AND shobj_description(oid, 'pg_database') = %s",
                    (name, SEEDED),
                ).fetchone()
                is not None
            )

    def release(self, template: str) -> None:
        """Drop a seeded template, unless templates are kept for the next run."""
        if not self.reuse:
            self.drop(template)

    def drop(self, name: str) -> None:
        devserver.drop_database(self.dsn_of(name))
        if name in self._made:
            self._made.remove(name)

    def drop_all(self) -> None:
        """Drop every database this run made."""
        for name in list(self._made):
            self.drop(name)

    def describe(self) -> dict[str, str]:
        """Server version and the settings that shape the figures."""
        out = {}
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for name in (
                "server_version",
                "shared_buffers",
                "max_wal_size",
                "wal_compression",
                "full_page_writes",
                "autovacuum",
            ):
                row = conn.execute(sql.SQL("SELECT current_setting({})").format(name)).fetchone()
                out[name] = str(row[0]) if row else "?"
        return out


def wal_and_checkpoints(dsn: str) -> tuple[int, int]:
    """``(WAL position in bytes, checkpoints so far)`` of the server: taken around a variant,
    the WAL it wrote and the checkpoints it caused (or met)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, checkpoints_timed + checkpoints_req "
            "FROM pg_stat_bgwriter"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def timed(
    conn: psycopg.Connection[Any], stmt: sql.Composed, params: Mapping[str, Any] | None = None
) -> tuple[float, int]:
    """Run ``stmt`` once; ``(seconds, rowcount)``."""
    t0 = time.perf_counter()
    cur = conn.execute(stmt, params)
    return time.perf_counter() - t0, max(cur.rowcount, 0)

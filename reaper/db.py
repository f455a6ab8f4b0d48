"""The database: the only module that imports psycopg.

It owns the connection pool, the session settings every reaper connection carries, the
composition of a sweep's statements, and the translation of psycopg's errors into
:mod:`reaper.errors` (with any password scrubbed from the message).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
import psycopg.errors
from psycopg import sql
from psycopg.abc import PQGen
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader
from psycopg_pool import ConnectionPool, PoolTimeout

from reaper import errors, sqlfiles, sqlinfo
from reaper import predicate as predicates
from reaper.pacing import Sample, Standby
from reaper.predicate import CatalogObjects, CheckedPredicate

if TYPE_CHECKING:
    from reaper.settings import Settings
    from reaper.sweeps import Sweep

APPLICATION_NAME = "reaper"
# Rounds of the session-pooler check (Database.check_advisory_locks with --session-pooler):
# a millisecond each.
LOCK_PROBE_ROUNDS = 20
# One line (stderr, logs, /readyz) for a connection whose server process is not the one the
# server announced at connect: a pooler stands between reaper and PostgreSQL, and nothing
# says it keeps one server session per client connection.
LOCK_NOT_HELD = (
    "a session-level advisory lock cannot hold on this connection: it goes through a "
    "connection pooler (the server process answering is not the one announced at connect), "
    "and a transaction-pooling proxy (pool_mode=transaction) lends each transaction any "
    "server session; connect "
    "reaper to PostgreSQL directly, or, when the pooler runs pool_mode=session, say so "
    "with --session-pooler"
)
# The same, for a connection that --session-pooler vouches for, found moved all the same.
SESSION_MOVED = (
    "a session-level advisory lock did not hold across transactions: the pooler moved this "
    "connection to another server session, so it is not in pool_mode=session as "
    "--session-pooler says; connect reaper to PostgreSQL directly or through a pool in "
    "session mode"
)

# Client-side TCP settings every reaper connection gets unless its DSN sets them (libpq
# parameter names; see docs/connections.md). A connection whose peer went silent is declared
# dead after about keepalives_idle + keepalives_interval x keepalives_count seconds when idle,
# and after tcp_user_timeout when data it sent stays unacknowledged: both well under the 30 s
# in which a sweep on a silent network must fail.
KEEPALIVES_IDLE_SECONDS = 5
KEEPALIVES_INTERVAL_SECONDS = 5
KEEPALIVES_COUNT = 3
TCP_USER_TIMEOUT_SECONDS = 20
# The server checks this often whether reaper's side of a running statement's connection is
# still there (client_connection_check_interval, PostgreSQL 14+).
CLIENT_CONNECTION_CHECK_SECONDS = 5
# The watchdog: a wait on the server (a statement, a commit, a fetch) that lasts longer than
# statement_timeout + this margin is cancelled; when the cancel gets no answer within
# WATCHDOG_CANCEL_SECONDS either, the connection is closed and the wait fails. It catches what
# no socket option sees: a middlebox that keeps both TCP connections open and forwards nothing.
WATCHDOG_MARGIN_SECONDS = 5.0
WATCHDOG_CANCEL_SECONDS = 2.0
# The pool's check of an idle connection before lending it (an empty statement) waits this long.
POOL_CHECK_SECONDS = 5.0
# TID range scans (the heap walk) arrived in PostgreSQL 14; older servers use the index path.
MIN_HEAP_WALK_VERSION = 140000
# A batch waits at most this long for a row lock a writer holds (never longer than the
# session's lock_timeout): then it fails, and the runner splits it until the held row is
# alone. Far below deadlock_timeout (1 s by default), so reaper always gives up first.
BATCH_LOCK_TIMEOUT_MS = 5

_log = logging.getLogger(__name__)


def _ms(d: timedelta) -> int:
    return max(1, round(d.total_seconds() * 1000))


def describe_target(dsn: str | None) -> str:
    """``user@host:port/dbname`` of a connection string, never its password."""
    try:
        params = conninfo_to_dict(dsn or "")
    except psycopg.ProgrammingError:
        return "<unparsable connection string>"
    host = params.get("host") or params.get("hostaddr") or "(libpq default host)"
    port = params.get("port") or ""
    user = params.get("user") or ""
    db = params.get("dbname") or ""
    return f"{f'{user}@' if user else ''}{host}{f':{port}' if port else ''}/{db}"


# A password at least this long is scrubbed wherever it appears; a shorter one only where a
# password goes (password=..., a URI's user:...@, a quoted token), so that a password "a" or
# "on" does not turn every "a" or "on" of a message into "***".
_SCRUB_ANYWHERE_CHARS = 8
_SCRUB_TOKEN_CHARS = 4
# Where a password goes, whatever its value: the value is scrubbed even when it is not one we
# know (a percent-encoded form, a second DSN quoted in a message).
_PASSWORD_POSITIONS = (
    # password = 'quoted \' value' | password=value
    re.compile(r"(password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|[^\s'\"]+)", re.IGNORECASE),
    # scheme://user:value@host
    re.compile(r"(://[^:/@?#\s]*:)([^@/?#\s]*)(?=@)"),
)


class _Redactor:
    """Scrubs a connection string's password out of any text: every password of the DSN, of any
    length, wherever a password goes (``password=``, a URI's ``user:...@``, a quoted token);
    a long one (8+ characters) wherever it appears, a 4+ character one as a whole token."""

    def __init__(self, dsn: str | None) -> None:
        secrets: list[str] = []
        try:
            secrets.append(str(conninfo_to_dict(dsn or "").get("password") or ""))
        except psycopg.ProgrammingError:
            # Unparsable (a bad percent-escape, say): find the password by its shape, since
            # libpq's complaint may quote it ('invalid percent-encoded token: "Sekr%zz"').
            secrets += re.findall(r"://[^:/@?#]*:([^@/?#]*)@", dsn or "")
            secrets += [a or b for a, b in re.findall(
                r"password\s*=\s*(?:'((?:[^'\\]|\\.)*)'?|(\S+))", dsn or ""
            )]
        self._dsn = dsn or ""
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._patterns = []
        for secret in self._secrets:
            quoted = re.escape(secret)
            if len(secret) >= _SCRUB_ANYWHERE_CHARS:
                self._patterns.append(re.compile(quoted))
            elif len(secret) >= _SCRUB_TOKEN_CHARS:
                self._patterns.append(re.compile(rf"(?<![\w%]){quoted}(?![\w%])"))
            else:
                # A quoted token: libpq quotes what it complains about ("...", '...').
                self._patterns.append(re.compile(rf"(?<=[\"']){quoted}(?=[\"'])"))

    def __call__(self, text: str) -> str:
        if self._dsn and len(self._dsn) > 1:
            text = text.replace(self._dsn, "***")
        text = _PASSWORD_POSITIONS[0].sub(r"\1***", text)
        text = _PASSWORD_POSITIONS[1].sub(r"\1***", text)
        for pattern in self._patterns:
            text = pattern.sub("***", text)
        return text


def dsn_has_password(dsn: str | None) -> bool:
    """True when the connection string carries a password (False when it does not parse)."""
    try:
        return bool(conninfo_to_dict(dsn or "").get("password"))
    except psycopg.ProgrammingError:
        return bool(re.search(r"://[^:/@?#]*:[^@/?#]+@|password\s*=", dsn or "", re.IGNORECASE))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


@contextlib.contextmanager
def translate_errors(redact: _Redactor, context: str = "") -> Iterator[None]:
    """Re-raise psycopg errors as :mod:`reaper.errors`, password scrubbed, context prefixed."""
    try:
        with _translate(redact, context):
            yield
    except errors.DatabaseError as exc:
        cause = exc.__cause__
        if isinstance(cause, psycopg.Error) and exc.sqlstate is None:
            exc.sqlstate = cause.sqlstate
            exc.server_context = cause.diag.context
        raise


@contextlib.contextmanager
def _translate(redact: _Redactor, context: str = "") -> Iterator[None]:
    prefix = f"{context}: " if context else ""
    try:
        yield
    except psycopg.errors.InsufficientPrivilege as exc:
        raise errors.PrivilegeMissing(prefix + redact(_first_line(exc))) from exc
    except (
        psycopg.errors.UndefinedTable,
        psycopg.errors.UndefinedColumn,
        psycopg.errors.UndefinedFunction,
        psycopg.errors.InvalidSchemaName,
    ) as exc:
        raise errors.ObjectMissing(prefix + redact(_first_line(exc))) from exc
    except psycopg.errors.ReadOnlySqlTransaction as exc:
        raise errors.ReadOnlyDatabase(
            prefix + "the server is read-only (a standby, or a demoted primary after a "
            f"failover): {redact(_first_line(exc))}"
        ) from exc
    except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as exc:
        raise errors.StatementTimeout(prefix + redact(_first_line(exc))) from exc
    except psycopg.errors.ForeignKeyViolation as exc:
        raise errors.ForeignKeyConflict(prefix + redact(_first_line(exc))) from exc
    except PoolTimeout as exc:
        raise errors.ConnectionFailed(prefix + redact(_first_line(exc))) from exc
    except psycopg.OperationalError as exc:
        raise errors.ConnectionFailed(prefix + redact(_first_line(exc))) from exc
    except psycopg.Error as exc:
        raise errors.DatabaseError(prefix + redact(_first_line(exc))) from exc


def table_identifier(table: str) -> sql.Identifier:
    """``schema.table`` or ``table`` as a quoted identifier (never string formatting)."""
    return sql.Identifier(*table.split(".", 1))


def compose_relations(template: str, **relations: tuple[str, str]) -> sql.Composed:
    """``template`` (one statement with ``{slot}`` placeholders) with each slot filled by a
    ``(schema, name)`` relation, quoted as an identifier (never string formatting)."""
    return sql.SQL(template).format(**{k: sql.Identifier(*v) for k, v in relations.items()})


def advisory_lock_key(sweep: str) -> int:
    """The advisory lock key of sweep ``sweep``: the first 8 bytes of SHA-256 of
    ``reaper:sweep:<name>``, as a signed 64-bit integer (``pg_try_advisory_lock(bigint)``).

    Fixed by the name alone, so every reaper process (any version, any host) agrees on it.
    """
    digest = hashlib.sha256(f"reaper:sweep:{sweep}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@dataclass(frozen=True)
class LockHolder:
    """A session that holds one of a sweep's advisory locks (from pg_stat_activity).

    ``client`` is an address, ``local`` (a Unix socket) or ``hidden``; ``backend_start``
    (connected since) and ``state_since`` (in its current state since, e.g. idle since it
    took the lock) are None where PostgreSQL hides them from reaper's role (they need
    pg_read_all_stats).
    """

    pid: int
    application_name: str
    client: str
    backend_start: datetime | None
    user: str = ""
    state_since: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO 8601 (None when hidden)."""
        return {
            "pid": self.pid,
            "user": self.user,
            "application_name": self.application_name,
            "client": self.client,
            "connected_since": self.backend_start.isoformat() if self.backend_start else None,
            "state_since": self.state_since.isoformat() if self.state_since else None,
        }

    def describe(self) -> str:
        """One line: ``pid 123 (user x, application 'psql', client 10.0.0.5, connected since
        2026-06-01T12:00:00+00:00)``."""
        since = self.backend_start.isoformat(timespec="seconds") if self.backend_start \
            else "hidden"
        return (
            f"pid {self.pid} (user {self.user or '?'}, application {self.application_name!r}, "
            f"client {self.client}, connected since {since})"
        )


def regclass_text(table: str) -> str:
    """``schema.table`` or ``table`` as text for a ``::regclass`` cast, each part quoted the way
    :func:`table_identifier` quotes it: an unquoted name would be folded to lower case, and
    the catalog would be asked about another table than the one the sweep deletes from. A
    value (a parameter), never composed into SQL."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in table.split(".", 1))


@dataclass(frozen=True)
class TableStats:
    """A table's size, from the catalog: no scan.

    Attributes:
        estimated_rows: ``pg_class.reltuples`` (-1 when never vacuumed or analyzed).
        analyzed_blocks: ``pg_class.relpages``, heap blocks when last analyzed.
        blocks: heap blocks now (``pg_relation_size`` / block size).
    """

    estimated_rows: int
    analyzed_blocks: int
    blocks: int

    @property
    def rows_per_block(self) -> float:
        """Estimated rows per heap block (0 when the table was never analyzed)."""
        if self.estimated_rows <= 0 or self.analyzed_blocks <= 0:
            return 0.0
        return self.estimated_rows / self.analyzed_blocks


# Why reaper refuses to delete from a relation of each kind (pg_class.relkind) other than an
# ordinary table ('r') and a partitioned table ('p', whose rows are in its partitions).
REFUSED_KINDS = {
    "v": "a view: its rows belong to the tables it reads; declare a sweep of each of those",
    "m": "a materialized view: REFRESH MATERIALIZED VIEW replaces its rows, DELETE cannot",
    "f": "a foreign table: its rows live on another server, where a tuple id names no row "
         "reaper can delete safely; sweep the table on that server",
    "S": "a sequence",
    "i": "an index",
    "I": "a partitioned index",
    "c": "a composite type",
    "t": "a TOAST table",
}

# The only key that builds a Heap: Session.heaps holds it, after the catalog said relkind 'r'.
_CATALOG_PROOF = object()


@dataclass(frozen=True)
class Heap:
    """One ordinary table (``pg_class.relkind = 'r'``): a heap of its own, in which a tuple
    id names exactly one row. Built only by :meth:`Session.heaps` from the catalog; every
    statement that deletes is composed from one Heap and reads it ``FROM ONLY``, so no batch
    can reach a row of another relation (an inheritance child, a partition).

    Attributes:
        oid: ``pg_class.oid``.
        schema, name: its schema and name.
        stats: its size from the catalog when the run began.

    Raises:
        TypeError: built by anything but :meth:`Session.heaps`.
    """

    oid: int
    schema: str
    name: str
    stats: TableStats
    proof: object = field(repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.proof is not _CATALOG_PROOF:
            raise TypeError("a Heap is read from the catalog (Session.heaps), never built")

    @property
    def qualified(self) -> str:
        """``schema.name``, for logs."""
        return f"{self.schema}.{self.name}"


class HeapStatements:
    """The statements that delete one sweep's garbage from one :class:`Heap`.

    ``alias`` is the declared table's name, so that a predicate that names its columns as
    ``table.column`` reads the same in every heap.
    """

    def __init__(self, heap: Heap, table: str, predicate: str) -> None:
        self.heap = heap
        parts = {
            "heap": sql.Identifier(heap.schema, heap.name),
            "alias": sql.Identifier(table.split(".", 1)[-1]),
            "predicate": sql.SQL(predicate),
        }

        def compose(name: str) -> sql.Composed:
            return sql.SQL(sqlfiles.engine(name)).format(**parts)

        self.heap_batch = compose("heap_batch")
        self.heap_range_batch = compose("heap_range_batch")
        self.index_batch = compose("index_batch")
        self.heap_first_victim = compose("heap_first_victim")
        self.index_first_victim = compose("index_first_victim")
        self.delete_row = compose("delete_row")
        self.count_eligible = compose("heap_count_eligible")
        self.sample_eligible = compose("sample_eligible")


def utc_instant(value: datetime) -> datetime:
    """``value`` as an aware datetime in UTC, the one form in which reaper does arithmetic
    on instants (exact: UTC has no DST).

    Raises:
        ValueError: ``value`` is naive (a wall time without a zone is no instant).
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{value!r} has no time zone: a wall time is not an instant")
    return value.astimezone(UTC)


class _UtcTimestamptzLoader(TimestamptzLoader):
    def load(self, data: Any) -> datetime:
        return utc_instant(super().load(data))


class _UtcTimestamptzBinaryLoader(TimestamptzBinaryLoader):
    def load(self, data: Any) -> datetime:
        return utc_instant(super().load(data))


class SweepStatements:
    """A sweep's statements, composed once from the engine templates and its predicate.

    The table goes through :class:`psycopg.sql.Identifier`; the predicate (and ``since``)
    only as a :class:`reaper.predicate.CheckedPredicate`, which only
    :meth:`Session.check_predicate` builds, after the predicate rule and the server's
    catalog accepted it: no statement evaluates a predicate that was not checked. The
    statements that delete are per heap (``heaps``, from :meth:`Session.statements`); those
    that only read (backlog, oldest row, plans) read the declared table, which covers the
    same rows.
    """

    def __init__(
        self,
        checked: CheckedPredicate,
        *,
        heaps: Sequence[Heap] = (),
    ) -> None:
        if not isinstance(checked, CheckedPredicate):
            raise TypeError("SweepStatements takes a CheckedPredicate (Session.check_predicate)")
        table, predicate, since = checked.table, checked.text, checked.since
        cutoff_param = checked.cutoffs[0] if checked.cutoffs else "cutoff"
        self.checked = checked
        self.table = table
        self.heaps = tuple(HeapStatements(h, table, predicate) for h in heaps)
        parts = {"table": table_identifier(table), "predicate": sql.SQL(predicate)}
        # What a batch reads, planned over the declared table (reaper check): one victims
        # query through the predicate's index, across every heap the table covers.
        self.index_plan = sql.SQL(sqlfiles.engine("index_plan")).format(**parts)
        self.count_eligible = sql.SQL(sqlfiles.engine("count_eligible")).format(**parts)
        self.estimate_eligible = sql.SQL(sqlfiles.engine("estimate_eligible")).format(**parts)
        self._parts = parts
        self._predicate = predicate
        self._tables_read: tuple[str, ...] | None = None
        self.backlog_rows = sql.SQL(sqlfiles.engine("backlog_rows")).format(**parts)
        self.backlog_oldest: sql.Composed | None = None
        if since:
            self.backlog_oldest = sql.SQL(sqlfiles.engine("backlog_oldest")).format(
                since=sql.SQL(since), cutoff=sql.Placeholder(cutoff_param), **parts
            )
        self.sample_eligible = sql.SQL(sqlfiles.engine("sample_eligible")).format(
            heap=parts["table"], alias=sql.Identifier(table.split(".", 1)[-1]),
            predicate=parts["predicate"],
        )

    @property
    def tables_read(self) -> tuple[str, ...]:
        """The swept table, then every table the predicate's subqueries read (parsed once).

        Raises:
            ConfigError: the predicate does not parse.
        """
        if self._tables_read is None:
            self._tables_read = sqlinfo.tables_read(self.table, self._predicate)
        return self._tables_read

    def oldest_eligible(self, expressions: Sequence[str]) -> sql.Composed:
        """``SELECT least(min(expr), ...) FROM table WHERE predicate`` over ``expressions``,
        SQL text taken from the predicate itself (:func:`reaper.sqlinfo.cutoff_expressions`)."""
        oldest = sql.SQL("least({})").format(
            sql.SQL(", ").join(
                sql.SQL("min(({})::timestamptz)").format(sql.SQL(e)) for e in expressions
            )
        )
        return sql.SQL(sqlfiles.engine("oldest_eligible")).format(oldest=oldest, **self._parts)

    def required_privileges(self) -> list[tuple[str, str]]:
        """``(table, privilege)`` pairs the batches need: SELECT on every table read, DELETE on
        the swept table. No UPDATE: batches take no row lock (``FOR UPDATE``) and can change
        no row. PostgreSQL checks a partition's or an inheritance child's own privileges when
        it is named directly, as every batch names its heap: each heap needs SELECT and
        DELETE too."""
        need = [(self.table, p) for p in ("SELECT", "DELETE")]
        for h in self.heaps:
            if h.heap.qualified != self.table and h.heap.name != self.table:
                need += [(h.heap.qualified, p) for p in ("SELECT", "DELETE")]
        need += [(t, "SELECT") for t in self.tables_read[1:]]
        return need


class _OverLimit(Exception):
    """A whole-range batch found more victims than its limit; it was rolled back."""


_RV = TypeVar("_RV")


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait on the server has a deadline: reaper's watchdog.

    Every operation on the connection (a statement, its rows, a commit, the pool's check)
    waits at most ``bound`` seconds; past it the running statement is cancelled, and when the
    cancel gets no answer within :data:`WATCHDOG_CANCEL_SECONDS` the connection is closed and
    the operation raises ``psycopg.OperationalError`` (:class:`reaper.errors.ConnectionFailed`
    once translated). ``bound`` None: no deadline (an index build), the socket options only.

    Attributes:
        bound: seconds an operation may wait (statement_timeout + WATCHDOG_MARGIN_SECONDS).
        server_pid: the server process that answered the first statement (pg_backend_pid()).
    """

    bound: float | None = None
    server_pid: int | None = None

    @property
    def pooled(self) -> bool:
        """True when the server process answering is not the one the server announced at
        connect (libpq's backend pid): a pooler issued its own cancel key. PostgreSQL itself
        always announces the process that serves the connection."""
        return self.server_pid is not None and self.server_pid != self.info.backend_pid

    def wait(
        self, gen: PQGen[_RV], interval: float = 0.1, timeout: float | None = None
    ) -> _RV:
        """Consume ``gen`` (psycopg's network operation) within ``bound`` seconds (see the
        class); an explicit ``timeout`` (psycopg's own) is kept as given."""
        bound = self.bound
        if bound is None or timeout is not None:
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, timeout=bound)
        except psycopg.errors._WaitTimeout:
            pass
        _log.warning(
            "watchdog: no answer from the server for %.0f s (statement_timeout + %.0f s); "
            "cancelling", bound, WATCHDOG_MARGIN_SECONDS,
        )
        with contextlib.suppress(Exception):
            self.cancel_safe(timeout=WATCHDOG_CANCEL_SECONDS)
        try:
            # The server answered the cancel: the statement ends with its error (QueryCanceled).
            return super().wait(gen, interval, timeout=WATCHDOG_CANCEL_SECONDS)
        except psycopg.errors._WaitTimeout:
            pass
        self.pgconn.finish()
        waited = bound + 2 * WATCHDOG_CANCEL_SECONDS
        raise psycopg.OperationalError(
            f"no answer from the server for {waited:.0f} s, not even to a cancel request: "
            "the network or a middlebox went silent; reaper's watchdog closed the connection"
        )


@contextlib.contextmanager
def _bounded(conn: psycopg.Connection[Any], seconds: float | None) -> Iterator[None]:
    """Lower ``conn``'s watchdog bound to ``seconds`` for the block (never raises it)."""
    if seconds is None or not isinstance(conn, BoundedConnection):
        yield
        return
    old = conn.bound
    conn.bound = seconds if old is None else min(old, seconds)
    try:
        yield
    finally:
        conn.bound = old


@dataclass(frozen=True)
class BatchRows:
    """What one batch did: rows ``deleted``, rows ``selected`` as victims (more than deleted
    when a concurrent transaction changed a victim so that the predicate no longer holds),
    and the ``last`` tuple id selected, ``(block, offset)`` (heap walk only; None when none)."""

    deleted: int
    selected: int
    last: tuple[int, int] | None = None


def parse_tid(text: str) -> tuple[int, int]:
    """``'(12,3)'`` -> ``(12, 3)``."""
    block, offset = text.strip("()").split(",")
    return int(block), int(offset)


def tid_text(tid: tuple[int, int]) -> str:
    """``(12, 3)`` -> ``'(12,3)'``, for a ``::tid`` parameter."""
    return f"({tid[0]},{tid[1]})"


class Session:
    """One connection, borrowed from the pool for one sweep run. Not thread-safe.

    Every method runs its statement in its own short transaction (the connection is in
    autocommit mode and batches open an explicit transaction), and raises
    :class:`reaper.errors.DatabaseError` subclasses.
    """

    def __init__(
        self, conn: psycopg.Connection[Any], redact: _Redactor, *, session_pooler: bool = False
    ) -> None:
        self._conn = conn
        self._redact = redact
        self._session_pooler = session_pooler
        # Every timestamptz crosses into Python as a UTC instant, whatever the session's
        # TimeZone: Python subtracts aware datetimes of one ZoneInfo on wall-clock time, so a
        # cutoff computed from a Sydney now() across a DST change would be an hour off.
        conn.adapters.register_loader("timestamptz", _UtcTimestamptzLoader)
        conn.adapters.register_loader("timestamptz", _UtcTimestamptzBinaryLoader)

    def _require_own_session(self) -> None:
        """Refuse, before any lock or delete, a connection through a pooler that nothing says
        keeps one server session per client connection (deterministic: an identity check).

        Raises:
            LockNotHeld: the connection goes through a pooler and --session-pooler is off.
        """
        if (
            isinstance(self._conn, BoundedConnection)
            and self._conn.pooled
            and not self._session_pooler
        ):
            raise errors.LockNotHeld(LOCK_NOT_HELD)

    def write_refusal(self) -> tuple[str | None, bool]:
        """Why the server would refuse reaper's deletes now, and whether new sessions would see
        another ``default_transaction_read_only`` than this one.

        Returns:
            ``(reason, stale)``: ``reason`` None when the server accepts writes; ``stale``
            True when this session's read-only default differs from the one a new session of
            this role would get now (an ALTER DATABASE/ROLE ... SET since it connected).
        """
        with self._errors(), self._conn.cursor() as cur:
            cur.execute(sql.SQL(sqlfiles.ops("write_refusal")))
            row = cur.fetchone()
        assert row is not None
        return (None if row[0] is None else str(row[0])), bool(row[1])

    @property
    def server_version(self) -> int:
        """The server's version number, e.g. 150004."""
        return self._conn.info.server_version

    @property
    def backend_pid(self) -> int:
        """The server process of this connection (for pg_stat_activity)."""
        return self._conn.info.backend_pid

    @property
    def reached(self) -> str:
        """``user@host:port/dbname`` as this connection reached them, never a password."""
        info = self._conn.info
        return f"{info.user}@{info.host}:{info.port}/{info.dbname}"

    def _errors(self, context: str = "") -> contextlib.AbstractContextManager[None]:
        return translate_errors(self._redact, context)

    @contextlib.contextmanager
    def _sweep_errors(self, stmts: SweepStatements) -> Iterator[None]:
        """Translate errors; a missing privilege is re-raised naming what to grant."""
        try:
            with self._errors(stmts.table):
                yield
        except errors.PrivilegeMissing as exc:
            detail = self._describe_missing(stmts.required_privileges())
            if detail is None:
                raise
            # PostgreSQL's own line names the table but not the privilege: keep it, add ours.
            raise errors.PrivilegeMissing(f"{exc}: {detail}") from exc

    def _describe_missing(self, needed: Sequence[tuple[str, str]]) -> str | None:
        try:
            missing = self.missing_privileges(needed)
            role = self.scalar("SELECT current_user::text")
        except errors.DatabaseError:
            return None
        if not missing:
            return None
        grants = "; ".join(f"GRANT {p} ON {t} TO {role}" for t, p in missing)
        what = ", ".join(f"{p} on table {t}" for t, p in missing)
        return f"role {role} lacks {what} (grant it: {grants}; see reaper/sql/grants.sql)"

    def missing_privileges(self, needed: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """The ``(table, privilege)`` pairs of ``needed`` that the current role lacks; UPDATE
        counts as held when granted on at least one column. Tables that do not exist are
        skipped."""
        quoted = {regclass_text(t): t for t, _ in needed}
        rows = self.rows(
            sqlfiles.ops("privileges"),
            {"tables": [regclass_text(t) for t, _ in needed],
             "privileges": [p for _, p in needed]},
        )
        return [(quoted[r["table_name"]], r["privilege"]) for r in rows if not r["granted"]]

    def rows(
        self, query: str | sql.SQL | sql.Composed, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Every row of ``query``, each a column name -> value dict."""
        stmt = sql.SQL(query) if isinstance(query, str) else query
        with self._errors(), self._conn.cursor(row_factory=dict_row) as cur:
            cur.execute(stmt, params)
            return list(cur.fetchall())

    def execute(
        self, query: str | sql.SQL | sql.Composed, params: Mapping[str, Any] | None = None
    ) -> None:
        """Run one statement outside any transaction block (autocommit), ignoring its rows:
        for ``CREATE INDEX CONCURRENTLY``, which refuses to run inside one."""
        stmt = sql.SQL(query) if isinstance(query, str) else query
        with self._errors(), self._conn.cursor() as cur:
            cur.execute(stmt, params)

    def cancel(self) -> None:
        """Ask the server to cancel this session's running statement (from another thread)."""
        self._conn.cancel_safe()

    def explain(
        self,
        statement: sql.Composable,
        params: Mapping[str, Any],
        *,
        index_batch: bool = False,
        context: str = "",
    ) -> dict[str, Any]:
        """The plan of ``statement`` with ``params`` (``EXPLAIN (FORMAT JSON)``, no run): the
        top node's dict (``Node Type``, ``Plans``, ``Relation Name``, ``Index Name`` ...).

        With ``index_batch`` it is planned as an index batch runs: after
        ``index_batch_settings.sql`` in the same transaction (sequential scans off), so a Seq
        Scan in the plan means no index can serve it.
        """
        query = sql.SQL(sqlfiles.ops("explain")).format(statement=statement)
        with self._errors(context), self._conn.transaction(), self._conn.cursor() as cur:
            if index_batch:
                cur.execute(sql.SQL(sqlfiles.engine("index_batch_settings")))
            cur.execute(query, params)
            row = cur.fetchone()
        assert row is not None
        doc = row[0] if not isinstance(row[0], str) else json.loads(row[0])
        plan: dict[str, Any] = doc[0]["Plan"]
        return plan

    def drop_index_concurrently(self, schema: str, name: str) -> None:
        """``DROP INDEX CONCURRENTLY IF EXISTS schema.name`` (never blocks writers)."""
        query = sql.SQL(sqlfiles.ops("drop_index_concurrently")).format(
            index=sql.Identifier(schema, name)
        )
        self.execute(query)

    def scalar(
        self, query: str | sql.Composed | sql.SQL, params: Mapping[str, Any] | None = None
    ) -> Any:
        """The first column of the first row of ``query`` (None when it returns no row)."""
        with self._errors(), self._conn.cursor() as cur:
            cur.execute(sql.SQL(query) if isinstance(query, str) else query, params)
            row = cur.fetchone()
            return None if row is None else row[0]

    def now(self, pinned: datetime | None = None) -> datetime:
        """The database clock's now(), or ``pinned`` as the database reads it (tests), as a
        UTC instant (:func:`utc_instant`): the one reading from which cutoffs are computed.

        Raises:
            ValueError: ``pinned`` is naive.
        """
        value = self.scalar(
            sqlfiles.engine("now"), {"now": None if pinned is None else utc_instant(pinned)}
        )
        assert isinstance(value, datetime)
        return utc_instant(value)

    def heaps(self, table: str) -> list[Heap]:
        """The heaps ``table`` covers, from the catalog: itself when it is an ordinary table,
        and every inheritance child and partition at any depth that is one. A partitioned
        table (or a partitioned child) has no heap of its own and adds none.

        Raises:
            ObjectMissing: no such table.
            RelationRefused: ``table``, or a relation it covers, is of a kind reaper cannot
                delete rows from by tuple id (a view, a foreign table, a materialized view,
                ...): names it and says why.
        """
        with self._errors(table), self._conn.cursor(row_factory=dict_row) as cur:
            cur.execute(sql.SQL(sqlfiles.engine("heaps")), {"table": regclass_text(table)})
            rows = cur.fetchall()
        out: list[Heap] = []
        for r in rows:
            kind = str(r["relkind"])
            if kind == "p":
                continue
            if kind != "r":
                why = REFUSED_KINDS.get(kind, f"a relation of kind {kind!r}")
                where = "is" if r["declared"] else (
                    f"covers {r['schema']}.{r['name']}, which is"
                )
                raise errors.RelationRefused(
                    f"table {table} {where} {why}; reaper deletes only from ordinary tables "
                    "(and the partitions and inheritance children of one)"
                )
            if r["delete_rule"]:
                where = "has" if r["declared"] else f"covers {r['schema']}.{r['name']}, which has"
                raise errors.RelationRefused(
                    f"table {table} {where} a rule ON DELETE: a rule rewrites a DELETE into "
                    "other statements, so the rows a batch selected would not be the rows it "
                    "deletes; drop the rule or sweep the table the rule writes to"
                )
            stats = TableStats(
                int(r["estimated_rows"]), int(r["analyzed_blocks"]), int(r["blocks"])
            )
            out.append(Heap(int(r["oid"]), str(r["schema"]), str(r["name"]), stats,
                            proof=_CATALOG_PROOF))
        return out

    def statements(self, checked: CheckedPredicate) -> SweepStatements:
        """A sweep's statements for its table, from a predicate :meth:`check_predicate`
        accepted: its deletes composed per heap it covers (:meth:`heaps`).

        Raises:
            ObjectMissing: no such table.
            RelationRefused: a relation reaper cannot delete from by tuple id.
        """
        return SweepStatements(checked, heaps=self.heaps(checked.table))

    def refused_objects(self, objects: CatalogObjects) -> list[tuple[str, str]]:
        """``(what, why)`` of each function, operator, cast type or relation in ``objects``
        that a predicate may not use (``refused_objects.sql``); every candidate of a name on
        this session's search path counts."""
        rows = self.rows(
            sqlfiles.engine("refused_objects"),
            {
                "functions": list(objects.functions),
                "operators": list(objects.operators),
                "types": list(objects.types),
                "relations": list(objects.relations),
                "table": objects.table,
                "columns": list(objects.columns),
                "all_columns": objects.all_columns,
            },
        )
        return [(str(r["what"]), str(r["why"])) for r in rows]

    def check_predicate(self, sweep: Sweep) -> CheckedPredicate:
        """``sweep``'s predicate and ``since`` expression, checked by the predicate rule and
        against this server's catalog (:func:`reaper.predicate.verify`): the one way to a
        :class:`SweepStatements`, so every command that evaluates a predicate checks it
        first.

        Raises:
            PredicateRefused: one line naming the sweep and the offending part.
            DatabaseError: the catalog could not be read.
        """
        try:
            return predicates.verify(
                self, sweep.table, sweep.predicate, list(sweep.cutoffs), sweep.since
            )
        except predicates.PredicateError as exc:
            where = f"sweep {sweep.name}" if sweep.builtin else f"[sweeps.{sweep.name}]"
            raise errors.PredicateRefused(f"{where} predicate {exc}") from None

    def estimate_eligible(self, stmts: SweepStatements, params: Mapping[str, Any]) -> float:
        """The planner's estimate of the rows the predicate matches (a plan, no scan)."""
        with self._sweep_errors(stmts), self._conn.cursor() as cur:
            cur.execute(stmts.estimate_eligible, params)
            row = cur.fetchone()
        assert row is not None
        doc = row[0] if not isinstance(row[0], str) else json.loads(row[0])
        return float(doc[0]["Plan"]["Plan Rows"])

    def sample_eligible(
        self, stmts: SweepStatements, hs: HeapStatements, params: Mapping[str, Any],
        percent: float,
    ) -> tuple[int, int]:
        """``(eligible, sampled)``: rows matching the predicate among the rows of a
        ``percent``-% sample of one heap's blocks (TABLESAMPLE SYSTEM: only those are read)."""
        with self._sweep_errors(stmts), self._conn.cursor() as cur:
            cur.execute(hs.sample_eligible, dict(params, percent=percent))
            row = cur.fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def count_eligible(self, stmts: SweepStatements, params: Mapping[str, Any]) -> int:
        """The rows the predicate matches now, counted heap by heap in the heaps a run deletes
        from (dry run: the count a real run would delete, on the same data)."""
        total = 0
        with self._sweep_errors(stmts):
            for hs in stmts.heaps:
                total += int(self.scalar(hs.count_eligible, params))
        return total

    def oldest_eligible(
        self, stmts: SweepStatements, params: Mapping[str, Any], expressions: Sequence[str]
    ) -> datetime | None:
        """The least value of ``expressions`` among the rows the predicate matches (None when
        no row matches, none is given, or they are not timestamps)."""
        if not expressions:
            return None
        with self._sweep_errors(stmts):
            value = self.scalar(stmts.oldest_eligible(expressions), params)
        return value if isinstance(value, datetime) else None

    def delete_heap_batch(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
        first: tuple[int, int],
        end_block: int,
        limit: int,
        skip: Sequence[tuple[int, int]] = (),
    ) -> BatchRows:
        """One heap-walk batch: delete the first ``limit`` garbage rows (in tuple id order) of
        heap ``hs`` from tuple id ``first`` to block ``end_block`` (excluded), minus ``skip``.

        One transaction, no row lock: a row a writer holds fails the batch within
        ``BATCH_LOCK_TIMEOUT_MS``. Returns what it did; ``last`` is the last tuple id selected.

        Raises:
            StatementTimeout: past statement_timeout (SQLSTATE 57014) or a row a writer held
                (55P03); nothing was deleted.
            DatabaseError: any other failure of the delete (a foreign key, a trigger), with
                its ``sqlstate``; nothing was deleted.
        """
        p = dict(params, first_tid=tid_text(first), end_tid=tid_text((end_block, 0)),
                 limit=limit, skip=[tid_text(t) for t in skip])
        # The whole range first (heap_range_batch.sql: the cheapest form), rolled back when it
        # held more than ``limit`` victims; then the range's first ``limit`` victims.
        try:
            return self._batch(hs.heap_range_batch, p, stmts, at_most=limit)
        except _OverLimit:
            return self._batch(hs.heap_batch, p, stmts)

    def delete_index_batch(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
        limit: int,
        skip: Sequence[tuple[int, int]] = (),
    ) -> BatchRows:
        """One index-served batch: delete at most ``limit`` garbage rows of heap ``hs``, minus
        ``skip``. One transaction, no row lock; raises as :meth:`delete_heap_batch`."""
        p = dict(params, limit=limit, skip=[tid_text(t) for t in skip])
        return self._batch(hs.index_batch, p, stmts, index=True)

    def first_victim(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
        skip: Sequence[tuple[int, int]] = (),
        first: tuple[int, int] | None = None,
        end_block: int | None = None,
    ) -> tuple[int, int] | None:
        """The tuple id of one garbage row of heap ``hs`` (not in ``skip``): the first of the
        range from ``first`` to ``end_block`` when given, else one found through the
        predicate's index. None when there is none. Reads only."""
        p: dict[str, Any] = dict(params, skip=[tid_text(t) for t in skip])
        if first is not None and end_block is not None:
            p.update(first_tid=tid_text(first), end_tid=tid_text((end_block, 0)))
            stmt = hs.heap_first_victim
        else:
            stmt = hs.index_first_victim
        with self._sweep_errors(stmts), self._conn.transaction(), self._conn.cursor() as cur:
            if stmt is hs.index_first_victim:
                cur.execute(sql.SQL(sqlfiles.engine("index_batch_settings")))
            cur.execute(stmt, p)
            row = cur.fetchone()
        return parse_tid(str(row[0])) if row is not None and row[0] is not None else None

    def delete_row(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
        tid: tuple[int, int],
    ) -> int:
        """Delete the row at ``tid`` of heap ``hs`` if the predicate still holds for it (0 or
        1 row). One transaction; raises as :meth:`delete_heap_batch`."""
        with self._sweep_errors(stmts), self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(sql.SQL(sqlfiles.engine("batch_settings")),
                        {"lock_timeout_ms": BATCH_LOCK_TIMEOUT_MS})
            cur.execute(hs.delete_row, dict(params, tid=tid_text(tid)))
            return max(cur.rowcount, 0)

    def _batch(
        self,
        stmt: sql.Composed,
        params: Mapping[str, Any],
        stmts: SweepStatements,
        *,
        index: bool = False,
        at_most: int | None = None,
    ) -> BatchRows:
        """Run one batch statement in its own transaction; with ``at_most``, roll it back
        (raising _OverLimit) when it deleted more rows than that."""
        self._require_own_session()
        with self._sweep_errors(stmts), self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(sql.SQL(sqlfiles.engine("batch_settings")),
                        {"lock_timeout_ms": BATCH_LOCK_TIMEOUT_MS})
            if index:
                cur.execute(sql.SQL(sqlfiles.engine("index_batch_settings")))
            cur.execute(stmt, params)
            row = cur.fetchone()
            assert row is not None
            if at_most is not None and int(row[0]) > at_most:
                raise _OverLimit  # rolls the transaction back: nothing was deleted
        return BatchRows(int(row[0]), int(row[1]), parse_tid(row[2]) if row[2] else None)

    def storage_rows(self, tables: Sequence[str]) -> dict[str, int]:
        """The catalog's estimated rows of each existing table in ``tables``."""
        with self._errors(), self._conn.cursor() as cur:
            quoted = {regclass_text(t): t for t in tables}
            cur.execute(
                sql.SQL(sqlfiles.engine("storage_rows")),
                {"tables": list(quoted)},
            )
            return {quoted[str(name)]: int(n) for name, n in cur.fetchall()}

    def backlog_rows(
        self, stmts: SweepStatements, params: Mapping[str, Any], limit: int
    ) -> int:
        """The rows the predicate matches now, counted through its index, at most ``limit``.

        Runs like an index batch (after ``index_batch_settings.sql``, in one transaction): with
        ``LIMIT`` and an overestimated match count the planner would otherwise read the whole
        table (bench B5: 141-159 ms against 5-7 ms at limit 1,000 on 10,000,000 rows).
        """
        with self._sweep_errors(stmts), self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(sql.SQL(sqlfiles.engine("index_batch_settings")))
            cur.execute(stmts.backlog_rows, dict(params, limit=limit))
            row = cur.fetchone()
        return int(row[0]) if row is not None else 0

    def backlog_oldest_seconds(
        self, stmts: SweepStatements, params: Mapping[str, Any], limit: int = 1_000
    ) -> float | None:
        """Seconds the oldest eligible row is past its cutoff (0.0 when none is eligible);
        None when the sweep declares no ``since`` expression.

        The oldest among the first ``limit`` eligible rows the predicate's index finds
        (``--backlog-limit``, as ``reaper_backlog_rows`` counts): exact when the backlog is
        under the limit or when the index returns rows oldest first (a ``since`` that is the
        indexed column), a lower bound otherwise. Run like an index batch: an unbounded
        ``ORDER BY since`` that no index serves sorted all 10,000 eligible rows of bench B5's
        table in 236 ms.
        """
        if stmts.backlog_oldest is None:
            return None
        with self._sweep_errors(stmts), self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(sql.SQL(sqlfiles.engine("index_batch_settings")))
            cur.execute(stmts.backlog_oldest, dict(params, limit=limit))
            row = cur.fetchone()
        value = row[0] if row is not None else None
        return max(float(value), 0.0) if value is not None else 0.0

    def pacing_sample(self, busy_window: float) -> Sample:
        """What the pacer measures before a batch (``pacing_sample.sql``): the WAL position,
        the other sessions busy on this database within ``busy_window`` seconds, and every
        standby's replay position and lag."""
        with self._errors(), self._conn.cursor() as cur:
            cur.execute(
                sql.SQL(sqlfiles.engine("pacing_sample")),
                {"busy_window": busy_window, "application_name": APPLICATION_NAME},
            )
            row = cur.fetchone()
        if row is None:
            return Sample()
        wal, busy, hidden, standbys = row
        if isinstance(standbys, str):
            standbys = json.loads(standbys)
        return Sample(
            wal_lsn=None if wal is None else int(wal),
            busy_sessions=int(busy),
            hidden_sessions=int(hidden),
            standbys=tuple(
                Standby(
                    name=str(s["name"]),
                    visible=bool(s["visible"]),
                    replay_lsn=None if s["replay_lsn"] is None else int(s["replay_lsn"]),
                    replay_lag=None if s["replay_lag"] is None else float(s["replay_lag"]),
                )
                for s in standbys
            ),
        )

    def missing_tables(self, tables: Sequence[str]) -> list[str]:
        """The tables among ``tables`` that do not exist or that this role cannot see."""
        with self._errors(), self._conn.cursor() as cur:
            quoted = {regclass_text(t): t for t in tables}
            cur.execute(sql.SQL(sqlfiles.engine("missing_tables")), {"tables": list(quoted)})
            return [quoted[str(row[0])] for row in cur.fetchall()]

    def try_advisory_locks(self, keys: Sequence[int]) -> bool:
        """Take the session-level advisory locks ``keys`` without waiting: all of them (True)
        or none (False, any taken released). Held until :meth:`release_advisory_locks` or the
        end of the session, then checked from a new transaction.

        Raises:
            LockNotHeld: the locks vanished between two transactions (a transaction-pooling
                proxy moved this session to another server backend).
        """
        self._require_own_session()
        server_pid = getattr(self._conn, "server_pid", None) or self.backend_pid
        with self._errors("advisory lock"), self._conn.cursor() as cur:
            cur.execute(
                sql.SQL(sqlfiles.engine("try_advisory_locks")),
                {"keys": list(keys), "server_pid": server_pid},
            )
            row = cur.fetchone()
        assert row is not None
        if row[0] != server_pid:
            # Another server session answered (a pooler moved this connection): the statement
            # took no lock there, so nothing is left behind.
            raise errors.LockNotHeld(SESSION_MOVED)
        got = row[1]
        if len(got or ()) < len(keys):
            self.release_advisory_locks()
            return False
        with self._errors("advisory lock"):
            held = int(self.scalar(sqlfiles.engine("held_advisory_locks"), {"keys": list(keys)}))
        if held < len(keys):
            self.release_advisory_locks()
            raise errors.LockNotHeld(SESSION_MOVED)
        return True

    def release_advisory_locks(self) -> None:
        """Release every session-level advisory lock of this session. Never raises: when the
        release fails the connection is closed, which releases them on the server."""
        if self._conn.closed:
            return  # the session is gone, and its locks with it
        try:
            self.scalar(sqlfiles.engine("release_advisory_locks"))
        except errors.DatabaseError as exc:
            _log.warning("advisory lock release failed, closing the connection: %s", exc)
            self._conn.close()

    def advisory_lock_holders(self, keys: Sequence[int]) -> list[LockHolder]:
        """The other sessions that hold any of the advisory locks ``keys``."""
        with self._errors("advisory lock"), self._conn.cursor() as cur:
            cur.execute(sql.SQL(sqlfiles.engine("advisory_lock_holders")), {"keys": list(keys)})
            return [LockHolder(int(r[0]), str(r[1]), str(r[2]), r[3], str(r[4]), r[5])
                    for r in cur.fetchall()]

    def execute_script(self, name: str) -> None:
        """Run every statement of a shipped script (``schema.sql``, ``indexes.sql``)."""
        with self._errors(name), self._conn.transaction(), self._conn.cursor() as cur:
            for stmt in sqlfiles.statements(name):
                cur.execute(sql.SQL(stmt))


def check_predicate_on(conn: psycopg.Connection[Any], sweep: Sweep) -> CheckedPredicate:
    """:meth:`Session.check_predicate` on a connection of the caller's own (benchmarks,
    tests that compose a sweep's statements outside a reaper session).

    Raises:
        PredicateRefused: the predicate is refused.
    """
    return Session(conn, _Redactor(None)).check_predicate(sweep)


class Database:
    """A pool of reaper connections to one PostgreSQL database.

    Every connection (the pool's, the dedicated sessions, the pooler check, the direct
    connection check) is made by :meth:`_connect` / :meth:`_configure`: autocommit,
    ``application_name=reaper``, no prepared statements, client keepalives and
    ``tcp_user_timeout`` unless the DSN sets them, the session settings below (the server's
    keepalives and ``client_connection_check_interval`` included, so the server notices a
    dead reaper and frees its locks) and the watchdog of :class:`BoundedConnection`. Each
    batch opens its own short transaction.

    Args:
        dsn: libpq connection string or URI; None or "" uses libpq's PG* variables.
        statement_timeout, lock_timeout, idle_in_transaction_session_timeout: PostgreSQL
            session settings (milliseconds resolution).
        synchronous_commit: wait for each batch's WAL flush.
        connect_timeout: how long a connection attempt, and :meth:`session`'s wait for a
            connection of the pool, may take.
        max_connections: the pool's size.
        session_pooler: the DSN points at a pooler in session mode (one server session per
            client connection for its whole life): accepted where a pooler is otherwise
            refused.
        time_zone: every session's TimeZone (``timestamp_time_zone``): the zone in which
            PostgreSQL reads a timestamp-without-time-zone or date column compared with a
            cutoff. Pinned, so that no server, database, role, DSN or PGTZ setting changes
            what a comparison means.

    Raises:
        ConfigError: the DSN does not parse.
    """

    @classmethod
    def from_settings(cls, settings: Settings, *, max_connections: int = 4) -> Database:
        """A Database (not yet open) from ``settings``' connection and session fields."""
        return cls(
            settings.dsn,
            statement_timeout=settings.statement_timeout,
            lock_timeout=settings.lock_timeout,
            idle_in_transaction_session_timeout=settings.idle_in_transaction_session_timeout,
            synchronous_commit=settings.synchronous_commit,
            connect_timeout=settings.connect_timeout,
            max_connections=max_connections,
            session_pooler=settings.session_pooler,
            time_zone=settings.timestamp_time_zone,
        )

    def __init__(
        self,
        dsn: str | None,
        *,
        statement_timeout: timedelta,
        lock_timeout: timedelta,
        idle_in_transaction_session_timeout: timedelta,
        synchronous_commit: bool = False,
        connect_timeout: timedelta = timedelta(seconds=10),
        max_connections: int = 4,
        session_pooler: bool = False,
        time_zone: str = "UTC",
    ) -> None:
        self.dsn = dsn or ""
        self.target = describe_target(dsn)
        self._redact = _Redactor(dsn)
        self._connect_timeout = connect_timeout
        self.session_pooler = session_pooler
        # The watchdog's bound on any one wait for the server (BoundedConnection).
        self.bound = statement_timeout.total_seconds() + WATCHDOG_MARGIN_SECONDS
        self._settings = {
            "application_name": APPLICATION_NAME,
            "statement_timeout": f"{_ms(statement_timeout)}ms",
            "lock_timeout": f"{_ms(lock_timeout)}ms",
            "idle_in_transaction_session_timeout": f"{_ms(idle_in_transaction_session_timeout)}ms",
            "synchronous_commit": "on" if synchronous_commit else "off",
            # A generic plan cannot know the cutoff, and could pick a full scan for a batch.
            "plan_cache_mode": "force_custom_plan",
            # What a wall time without a time zone means in a comparison with a cutoff.
            "TimeZone": time_zone,
        }
        try:
            params = conninfo_to_dict(self.dsn)
            self._conninfo = make_conninfo(
                self.dsn, connect_timeout=max(1, int(connect_timeout.total_seconds())),
                **{k: v for k, v in self.tcp_defaults().items() if k not in params},
            )
            effective = conninfo_to_dict(self._conninfo)
        except psycopg.ProgrammingError as exc:
            raise errors.ConfigError(
                f"--dsn is not a valid connection string: {self._redact(_first_line(exc))}"
            ) from None
        # The server watches reaper's side as reaper watches the server's: the same figures
        # (a DSN that sets the client's sets the server's too). Session settings any role may
        # set; on a Unix socket PostgreSQL ignores them.
        self._server_tcp = {
            "tcp_keepalives_idle": str(effective.get("keepalives_idle", "")),
            "tcp_keepalives_interval": str(effective.get("keepalives_interval", "")),
            "tcp_keepalives_count": str(effective.get("keepalives_count", "")),
            "tcp_user_timeout": str(effective.get("tcp_user_timeout", "")),
        }
        # Connections lent out now, so that a shutdown that runs out of time can cancel the
        # statement in flight (its transaction rolls back) instead of waiting for it.
        self._lent: set[psycopg.Connection[Any]] = set()
        self._lent_lock = threading.Lock()
        self._pool: ConnectionPool[BoundedConnection] = ConnectionPool(
            self._conninfo,
            connection_class=BoundedConnection,
            min_size=1,
            max_size=max_connections,
            kwargs=self._connect_kwargs(),
            configure=self._configure,
            # A connection that died while idle in the pool (a restart, pg_terminate_backend,
            # a silent network) is replaced before it is lent, so the run after an outage
            # does not fail on it; the check waits at most POOL_CHECK_SECONDS.
            check=self._check,
            # Back in the pool, a connection holds no advisory lock, whatever its run did.
            reset=self._reset,
            open=False,
            name="reaper",
            reconnect_timeout=0,
        )

    @staticmethod
    def tcp_defaults() -> dict[str, int]:
        """The libpq TCP parameters every reaper connection gets unless its DSN sets them:
        keepalives on (idle, interval: seconds) and ``tcp_user_timeout`` (milliseconds)."""
        return {
            "keepalives": 1,
            "keepalives_idle": KEEPALIVES_IDLE_SECONDS,
            "keepalives_interval": KEEPALIVES_INTERVAL_SECONDS,
            "keepalives_count": KEEPALIVES_COUNT,
            "tcp_user_timeout": TCP_USER_TIMEOUT_SECONDS * 1000,
        }

    @staticmethod
    def _connect_kwargs() -> dict[str, Any]:
        # No prepared statements: they are session state, and psycopg would prepare a batch
        # after its 5th run (no plan is gained: plan_cache_mode is force_custom_plan).
        return {
            "autocommit": True,
            "application_name": APPLICATION_NAME,
            "prepare_threshold": None,
        }

    def _connect(self) -> BoundedConnection:
        """A configured connection outside the pool (closed by the caller).

        Raises:
            ConnectionFailed: the database cannot be reached within connect_timeout.
        """
        with translate_errors(self._redact, f"cannot connect to {self.target}"):
            conn = BoundedConnection.connect(self._conninfo, **self._connect_kwargs())
            try:
                self._configure(conn)
            except BaseException:
                conn.close()
                raise
        return conn

    def _configure(self, conn: BoundedConnection) -> None:
        conn.bound = self.bound
        row = conn.execute(self._set_all(self._settings, "SELECT pg_backend_pid(), ")).fetchone()
        conn.server_pid = int(row[0]) if row else None
        # Best effort: a platform without TCP_USER_TIMEOUT or without closed-socket events
        # (client_connection_check_interval) refuses the setting; the client side and the
        # watchdog still bound every wait, so the connection is used all the same.
        version = conn.info.server_version
        watch = {
            name: value for name, value in self._server_tcp.items()
            if value and (name != "tcp_user_timeout" or version >= 120000)
        }
        if version >= 140000:
            watch["client_connection_check_interval"] = f"{CLIENT_CONNECTION_CHECK_SECONDS}s"
        try:
            conn.execute(self._set_all(watch, "SELECT "))
        except psycopg.errors.DatabaseError as exc:
            _log.warning("the server cannot watch reaper's connections (%s): %s",
                         ", ".join(watch), self._redact(_first_line(exc)))

    @staticmethod
    def _set_all(values: Mapping[str, str], select: str) -> sql.Composed:
        return sql.SQL(select + "{}").format(
            sql.SQL(", ").join(
                sql.SQL("set_config({}, {}, false)").format(sql.Literal(k), sql.Literal(v))
                for k, v in values.items()
            )
        )

    @staticmethod
    def _check(conn: BoundedConnection) -> None:
        with _bounded(conn, POOL_CHECK_SECONDS):
            conn.execute("")

    @staticmethod
    def _reset(conn: psycopg.Connection[Any]) -> None:
        conn.execute(sql.SQL(sqlfiles.engine("release_advisory_locks")))

    def check_advisory_locks(self, rounds: int = LOCK_PROBE_ROUNDS) -> None:
        """Check that a session-level advisory lock can hold on this connection string: that
        each client connection is one server session for its whole life.

        Deterministic, and takes no lock (nothing can outlive it): PostgreSQL announces at
        connect the server process that serves the connection (its cancel key); a pooler
        announces a key of its own, since any of its server sessions may serve the client. A
        connection whose serving process is not the announced one goes through a pooler and
        is refused, unless ``session_pooler`` vouches that the pooler keeps one server session
        per client connection; then ``rounds`` transactions must all be served by that same
        process (a pooler in transaction mode, mistaken for one in session mode, is caught
        when another client makes it switch: a sanity check, not a proof).

        Raises:
            LockNotHeld: a pooler that does not keep sessions (see :data:`LOCK_NOT_HELD`).
            ConnectionFailed: the database cannot be reached.
        """
        conn = self._connect()
        with conn, translate_errors(self._redact, "pooler check"):
            if not conn.pooled:
                return
            if not self.session_pooler:
                raise errors.LockNotHeld(LOCK_NOT_HELD)
            for _ in range(rounds):
                row = conn.execute("SELECT pg_backend_pid()").fetchone()
                if not row or row[0] != conn.server_pid:
                    raise errors.LockNotHeld(SESSION_MOVED)

    def cancel_running(self) -> int:
        """Cancel the statement in flight on every connection lent out now (its transaction
        rolls back). Returns how many connections were sent a cancel request."""
        with self._lent_lock:
            lent = list(self._lent)
        for conn in lent:
            with contextlib.suppress(Exception):
                conn.cancel_safe(timeout=2.0)
        return len(lent)

    def check_connection(self) -> int:
        """Connect once, outside the pool, to report why the database cannot be reached.

        Returns the server version number.

        Raises:
            ConnectionFailed: with libpq's reason (password scrubbed) and the target.
        """
        try:
            with BoundedConnection.connect(self._conninfo, **self._connect_kwargs()) as conn:
                return conn.info.server_version
        except psycopg.Error as exc:
            raise errors.ConnectionFailed(
                f"cannot connect to {self.target}: {self._redact(_first_line(exc))}"
            ) from None

    @contextlib.contextmanager
    def dedicated_session(self, *, statement_timeout: timedelta | None = None) -> Iterator[Session]:
        """A connection of its own, outside the pool, closed afterwards: for a session-level
        advisory lock that must outlive one statement, and for ``CREATE INDEX CONCURRENTLY``.

        Args:
            statement_timeout: replaces the session's statement_timeout; ``timedelta(0)``
                means none (an index build runs as long as it needs).

        Raises:
            ConnectionFailed: the database cannot be reached.
        """
        conn = self._connect()
        try:
            with translate_errors(self._redact):
                if statement_timeout is not None:
                    ms = round(statement_timeout.total_seconds() * 1000)
                    conn.execute(
                        "SELECT set_config('statement_timeout', %s, false)", (f"{ms}ms",)
                    )
                    # The watchdog follows: none for a statement that may run as long as it
                    # needs (the socket options still notice a dead peer).
                    conn.bound = (
                        statement_timeout.total_seconds() + WATCHDOG_MARGIN_SECONDS
                        if ms > 0 else None
                    )
            yield Session(conn, self._redact, session_pooler=self.session_pooler)
        finally:
            conn.close()

    def open(self) -> None:
        """Start the pool (connections are made in the background)."""
        self._pool.open(wait=False)

    def close(self, timeout: float = 5.0) -> None:
        """Close every connection; waits at most ``timeout`` seconds."""
        self._pool.close(timeout=timeout)

    @contextlib.contextmanager
    def session(self, *, bound: float | None = None) -> Iterator[Session]:
        """Borrow a connection for one sweep run.

        Args:
            bound: seconds any one wait on the server may take in this session (at most the
                watchdog's statement_timeout + margin): the readiness probe's is shorter.

        Raises:
            ConnectionFailed: no connection within connect_timeout.
        """
        if self._pool.closed:
            self.open()
        with (
            translate_errors(self._redact, f"cannot connect to {self.target}"),
            self._pool.connection(timeout=self._connect_timeout.total_seconds()) as conn,
            _bounded(conn, bound),
        ):
            with self._lent_lock:
                self._lent.add(conn)
            try:
                yield Session(conn, self._redact, session_pooler=self.session_pooler)
            finally:
                with self._lent_lock:
                    self._lent.discard(conn)

    def renew_connections(self) -> None:
        """Replace every pooled connection (those lent out when they come back): new sessions
        see settings that only apply at connect, such as an ALTER DATABASE ... SET."""
        if not self._pool.closed:
            self._pool.drain()

    def __enter__(self) -> Database:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

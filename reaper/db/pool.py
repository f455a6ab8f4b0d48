"""The connection pool of one database: how every reaper connection is made and configured,
the pooler check, and the sessions a run borrows."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any

import psycopg
import psycopg.errors
import structlog
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from reaper import errors, sqltext
from reaper.db.connection import (
    CLIENT_CONNECTION_CHECK_SECONDS,
    KEEPALIVES_COUNT,
    KEEPALIVES_IDLE_SECONDS,
    KEEPALIVES_INTERVAL_SECONDS,
    POOL_CHECK_SECONDS,
    TCP_USER_TIMEOUT_SECONDS,
    WATCHDOG_MARGIN_SECONDS,
    BoundedConnection,
    _bounded,
    _log,
)
from reaper.db.dsn import describe_target, parse_dsn
from reaper.db.errors import _first_line, _Redactor, translate_errors
from reaper.db.locks import LOCK_NOT_HELD, LOCK_PROBE_ROUNDS, SESSION_MOVED
from reaper.db.pinning import APPLICATION_NAME, ConnectionSettings, pin_statement
from reaper.db.session import Session

# The daemon's view of connecting: one line when connecting starts to fail (with the server's
# or libpq's own reason), one when it works again.
_events = structlog.get_logger("reaper.db")
# A checkout waits in slices this long, so that it ends with the reason of a connection
# attempt that failed while it waited, as soon as one does, not at connect_timeout.
_CHECKOUT_SLICE_SECONDS = 0.25


class _Pool(ConnectionPool[BoundedConnection]):
    """psycopg_pool's pool, reporting the outcome of every connection attempt it makes
    (``on_connect(None)`` for a success, ``on_connect(exc)`` for a failure, as it happens)."""

    def __init__(
        self, *args: Any, on_connect: Callable[[BaseException | None], None], **kwargs: Any
    ) -> None:
        self._on_connect = on_connect
        super().__init__(*args, **kwargs)

    def _connect(self, timeout: float | None = None) -> BoundedConnection:
        try:
            conn = super()._connect(timeout)
        except Exception as exc:
            self._on_connect(exc)
            raise
        self._on_connect(None)
        return conn


# The libpq parameters that reaper gives defaults (docs/connections.md): a DSN may set them,
# to a whole number. libpq itself checks them only when it connects, with an error that a
# refused connection would also give (exit 1, not 2).
_TIMING_PARAMS = (
    "connect_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
)


def _check_timing_params(params: Mapping[str, Any], dsn_label: str) -> None:
    """Refuse a DSN whose timing parameters are not whole numbers, or whose connect_timeout
    is 0 (libpq would then wait for a silent host forever).

    Raises:
        ConfigError: one line naming the parameter, its value and what is expected.
    """
    for name in _TIMING_PARAMS:
        value = str(params.get(name, "")).strip()
        if name in params and not value.isdigit():
            example = {"connect_timeout": 10, **Database.tcp_defaults()}[name]
            raise errors.ConfigError(
                f"{dsn_label} sets {name}={value!r}; expected a whole number, e.g. "
                f"{name}={example} (reaper's default)"
            )
    if "connect_timeout" in params and int(str(params["connect_timeout"])) == 0:
        raise errors.ConfigError(
            f"{dsn_label} sets connect_timeout=0, which waits for a host that does not answer "
            "forever: give seconds (at least 1), or leave it out to use --connect-timeout"
        )


class Database:
    """A pool of reaper connections to one PostgreSQL database.

    Every connection (the pool's, the dedicated sessions, the pooler check, the direct
    connection check) is made by :meth:`_connect` / :meth:`_configure`: autocommit,
    ``application_name=reaper``, no prepared statements, client keepalives and
    ``tcp_user_timeout`` unless the DSN sets them, the server's keepalives and
    ``client_connection_check_interval`` (so the server notices a dead reaper and frees its
    locks), the watchdog of :class:`BoundedConnection`, and the session settings of
    :mod:`reaper.db.pinning`, pinned again before every checkout from the pool and when a
    connection comes back to it. Each batch opens its own short transaction.

    Args:
        settings: how to connect and what every session is (:class:`ConnectionSettings`).
        max_connections: the pool's size.

    Raises:
        ConfigError: the DSN does not parse, or is ambiguous (the message never shows it).
    """

    def __init__(self, settings: ConnectionSettings, *, max_connections: int = 4) -> None:
        self.settings = settings
        params = parse_dsn(settings.dsn, settings.dsn_label)
        self.target = describe_target(params)
        self._redact = _Redactor(settings.dsn)
        self._connect_timeout = settings.connect_timeout
        self.session_pooler = settings.session_pooler
        # The watchdog's bound on any one wait for the server (BoundedConnection).
        self.bound = settings.statement_timeout.total_seconds() + WATCHDOG_MARGIN_SECONDS
        _check_timing_params(params, settings.dsn_label)
        # reaper's defaults for what the DSN leaves out; what it sets wins (its connect_timeout
        # then also bounds the wait for a connection of the pool).
        defaults: dict[str, Any] = {
            "connect_timeout": max(1, int(settings.connect_timeout.total_seconds())),
            **self.tcp_defaults(),
        }
        if "connect_timeout" in params:
            self._connect_timeout = timedelta(seconds=int(str(params["connect_timeout"])))
        self._conninfo = make_conninfo(
            settings.dsn, **{k: v for k, v in defaults.items() if k not in params}
        )
        effective = conninfo_to_dict(self._conninfo)
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
        # The last failed connection attempt's reason (None once one succeeds), and how many
        # attempts have failed: a checkout waiting for a connection ends on a failure.
        self._connect_lock = threading.Lock()
        self._connect_error: str | None = None
        self._connect_failed_at = 0.0  # time.monotonic() of the last failed attempt
        self._connect_failures = 0
        # The pool's own size, and the helper sessions lent now: each adds one connection to
        # the pool's size while it is lent (helper_session).
        self._max_connections = max_connections
        self._helpers = 0
        self._helpers_lock = threading.Lock()
        # The pin statements as sent, by (server version, read_only, reset): _pin_text.
        self._pins: dict[tuple[int, bool, bool], bytes] = {}
        self._pool: ConnectionPool[BoundedConnection] = _Pool(
            self._conninfo,
            connection_class=BoundedConnection,
            min_size=1,
            max_size=max_connections,
            kwargs=self._connect_kwargs(),
            configure=self._configure,
            # Before a connection is lent: its session settings pinned again (whatever a
            # statement of its last checkout changed), which also replaces one that died
            # while idle in the pool (a restart, pg_terminate_backend, a silent network), so
            # the run after an outage does not fail on it; at most POOL_CHECK_SECONDS.
            check=self._check,
            # Back in the pool, a connection holds no advisory lock and has its settings
            # pinned, whatever its run did.
            reset=self._reset,
            open=False,
            name="reaper",
            reconnect_timeout=0,
            on_connect=self._connect_outcome,
        )

    @property
    def dsn(self) -> str:
        """The connection string as given (it may hold a password: never print it)."""
        return self.settings.dsn

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
            "client_encoding": "UTF8",
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

    def _connect_outcome(self, exc: BaseException | None) -> None:
        """Record a connection attempt's outcome; the first failure after a success (or
        since start) is logged at once with libpq's or the server's reason, password
        scrubbed, and the next success says the database is reachable again."""
        with self._connect_lock:
            was = self._connect_error
            if exc is None:
                self._connect_error = None
            else:
                self._connect_error = (
                    f"cannot connect to {self.target}: {self._redact(_first_line(exc))}"
                )
                self._connect_failures += 1
                self._connect_failed_at = time.monotonic()
            now = self._connect_error
        if exc is not None and was is None:
            _events.warning("database_connect_failed", database=self.target, error=now)
        elif exc is None and was is not None:
            _events.info("database_connect_recovered", database=self.target)

    def _checkout(self, timeout: float, since: float | None = None) -> BoundedConnection:
        """A connection of the pool within ``timeout`` seconds.

        Args:
            since: when the caller started waiting for the database (``time.monotonic()``),
                if before this call: a connection attempt that failed since then, with none
                succeeding after it, fails this checkout at once.

        Raises:
            PoolTimeout: none came in time, and no connection attempt failed meanwhile.
            ConnectionFailed: a connection attempt failed while waiting: its reason.
        """
        deadline = time.monotonic() + timeout
        with self._connect_lock:
            failures = self._connect_failures
            if (
                since is not None
                and self._connect_error is not None
                and self._connect_failed_at >= since
            ):
                raise errors.ConnectionFailed(self._connect_error)
        while True:
            left = deadline - time.monotonic()
            try:
                return self._pool.getconn(timeout=max(min(left, _CHECKOUT_SLICE_SECONDS), 0.01))
            except PoolTimeout:
                with self._connect_lock:
                    failed = self._connect_failures != failures
                    reason = self._connect_error
                if failed and reason is not None:
                    raise errors.ConnectionFailed(reason) from None
                if left <= _CHECKOUT_SLICE_SECONDS:
                    raise PoolTimeout(f"no pooled connection within {timeout:.0f} s") from None

    @contextlib.contextmanager
    def _borrowed(self, timeout: float, since: float | None = None) -> Iterator[BoundedConnection]:
        conn = self._checkout(timeout, since)
        try:
            with conn:  # a pooled connection's exit ends its transaction, never closes it
                yield conn
        finally:
            self._pool.putconn(conn)

    def _configure(self, conn: BoundedConnection, *, read_only: bool = False) -> None:
        conn.bound = self.bound
        # Every transaction reaper opens says READ COMMITTED itself, whatever the session's
        # default (which _pin pins too).
        conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        conn.server_pid = self._pin(conn, read_only=read_only)
        # Best effort: a platform without TCP_USER_TIMEOUT or without closed-socket events
        # (client_connection_check_interval) refuses the setting; the client side and the
        # watchdog still bound every wait, so the connection is used all the same.
        version = conn.info.server_version
        watch = {
            name: value
            for name, value in self._server_tcp.items()
            if value and (name != "tcp_user_timeout" or version >= 120000)
        }
        if version >= 140000:
            watch["client_connection_check_interval"] = f"{CLIENT_CONNECTION_CHECK_SECONDS}s"
        try:
            conn.execute(self._set_all(watch, "SELECT "))
        except psycopg.errors.DatabaseError as exc:
            _log.warning(
                "the server cannot watch reaper's connections (%s): %s",
                ", ".join(watch),
                self._redact(_first_line(exc)),
            )

    def _pin(self, conn: psycopg.Connection[Any], *, read_only: bool = False) -> int | None:
        """The chokepoint: every session setting of :mod:`reaper.db.pinning` on ``conn``, in
        one round trip. Returns the server process id that answered.

        Raises:
            psycopg.Error: the server refused a setting (the connection is not used).
        """
        cur = conn.execute(self._pin_text(conn, read_only=read_only))
        while cur.description is None:  # past the SET to the SELECT's result
            if not cur.nextset():
                return None
        row = cur.fetchone()
        return int(row[0]) if row else None

    @staticmethod
    def _set_all(values: Mapping[str, str], select: str) -> sql.Composed:
        return sql.SQL(select + "{}").format(
            sql.SQL(", ").join(
                sql.SQL("set_config({}, {}, false)").format(sql.Literal(k), sql.Literal(v))
                for k, v in values.items()
            )
        )

    def _pin_text(
        self, conn: psycopg.Connection[Any], *, read_only: bool = False, reset: bool = False
    ) -> bytes:
        """:func:`pin_statement` as sent (``reset``: after the release of every advisory
        lock): it depends only on the settings, the server's version and ``read_only``, so
        it is composed and rendered once per Database (about 0.35 ms of CPU each time, and a
        run pins its connections two dozen times), never per checkout."""
        key = (conn.info.server_version, read_only, reset)
        text = self._pins.get(key)
        if text is None:
            stmt = pin_statement(self.settings, conn.info.server_version, read_only=read_only)
            if reset:
                stmt = sql.Composed(
                    [
                        sql.SQL(sqltext.engine("release_advisory_locks")),
                        sql.SQL("; "),
                        stmt,
                    ]
                )
            text = self._pins[key] = stmt.as_bytes(conn)
        return text

    def _check(self, conn: BoundedConnection) -> None:
        with _bounded(conn, POOL_CHECK_SECONDS):
            self._pin(conn)

    def _reset(self, conn: psycopg.Connection[Any]) -> None:
        # One query string, one round trip (a run returns its connection several times): the
        # advisory locks released, then every setting pinned (:meth:`_pin`'s statement).
        conn.execute(self._pin_text(conn, reset=True))

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
        with conn:
            self._check_sessions(conn, rounds)

    def _check_sessions(self, conn: BoundedConnection, rounds: int) -> None:
        """The body of :meth:`check_advisory_locks`, on a configured connection."""
        with translate_errors(self._redact, "pooler check"):
            if not conn.pooled:
                return
            if not self.session_pooler:
                raise errors.LockNotHeld(LOCK_NOT_HELD)
            for _ in range(rounds):
                row = conn.execute(sqltext.ops("backend_pid")).fetchone()
                if not row or row[0] != conn.server_pid:
                    raise errors.LockNotHeld(SESSION_MOVED)

    def cancel_running(self) -> int:
        """Cancel the statement in flight on every connection lent out now (its transaction
        rolls back). Returns how many connections were sent a cancel request."""
        with self._lent_lock:
            lent = list(self._lent)
        for conn in lent:
            if isinstance(conn, BoundedConnection):
                conn.cancel_within(2.0)
        return len(lent)

    def check_connection(self) -> int:
        """Connect once, outside the pool, to report why the database cannot be reached.

        Returns the server version number.

        Raises:
            ConnectionFailed: with libpq's reason (password scrubbed) and the target.
        """
        with self._reach() as conn:
            return conn.info.server_version

    def _reach(self) -> BoundedConnection:
        """A new connection, not yet configured (closed by the caller).

        Raises:
            ConnectionFailed: with libpq's reason (password scrubbed) and the target.
        """
        try:
            return BoundedConnection.connect(self._conninfo, **self._connect_kwargs())
        except psycopg.Error as exc:
            raise errors.ConnectionFailed(
                f"cannot connect to {self.target}: {self._redact(_first_line(exc))}"
            ) from None

    @contextlib.contextmanager
    def first_session(self, *, check_locks: bool = False) -> Iterator[Session]:
        """A configured session of its own, outside the pool, closed afterwards: for what a
        command checks before it starts, on one connection instead of one per check. Its
        connect fails as :meth:`check_connection` does; with ``check_locks``, the pooler
        check of :meth:`check_advisory_locks` runs on it before it is lent. It only reads:
        every transaction is READ ONLY. The pool is not touched: open it (:meth:`open`)
        inside the block, and its first connection is made while this one checks.

        Raises:
            ConnectionFailed: the database cannot be reached (libpq's reason, the target).
            LockNotHeld: with ``check_locks``, as :meth:`check_advisory_locks`.
        """
        conn = self._reach()
        try:
            with translate_errors(self._redact, f"cannot connect to {self.target}"):
                self._configure(conn, read_only=True)
            if check_locks:
                self._check_sessions(conn, LOCK_PROBE_ROUNDS)
            yield Session(conn, self._redact, session_pooler=self.session_pooler)
        finally:
            conn.close()

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
                    conn.execute(sqltext.ops("set_statement_timeout"), {"timeout": f"{ms}ms"})
                    # The watchdog follows: none for a statement that may run as long as it
                    # needs (the socket options still notice a dead peer).
                    conn.bound = (
                        statement_timeout.total_seconds() + WATCHDOG_MARGIN_SECONDS
                        if ms > 0
                        else None
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
    def session(
        self,
        *,
        bound: float | None = None,
        read_only: bool = False,
        since: float | None = None,
    ) -> Iterator[Session]:
        """Borrow a connection for one sweep run.

        Args:
            bound: seconds any one wait on the server may take in this session (at most the
                watchdog's statement_timeout + margin): the readiness probe's is shorter.
            read_only: every transaction of the session is READ ONLY (the server refuses
                any write with :class:`reaper.errors.ReadOnlyDatabase`): for what must only
                read (dry runs, status, gauges, checks). Pinned as the other settings are;
                the connection is pinned back when it returns to the pool.
            since: when the run started waiting (``time.monotonic()``; the daemon: when its
                job was handed to the executor): a connection attempt that failed since
                then, unless one succeeded after it, fails the checkout at once, so that a
                run that waited its turn behind others fails with them, not a connect
                timeout later.

        Raises:
            ConnectionFailed: no connection within connect_timeout, or (``since``) the
                attempts made since the run started waiting failed.
        """
        if self._pool.closed:
            self.open()
        with (
            translate_errors(self._redact, f"cannot connect to {self.target}"),
            self._borrowed(self._connect_timeout.total_seconds(), since) as conn,
            _bounded(conn, bound),
        ):
            if read_only:
                self._pin(conn, read_only=True)
            with self._lent_lock:
                self._lent.add(conn)
            try:
                yield Session(conn, self._redact, session_pooler=self.session_pooler)
            except errors.ReadOnlyDatabase as exc:
                if not read_only:
                    raise
                # The session only reads: a write it met is a function of the table's (a
                # policy's, a view's, a trigger's), not a read-only server.
                cause = exc.__cause__
                line = _first_line(cause) if isinstance(cause, Exception) else str(exc)
                raise errors.WriteInRead(
                    "a statement of this read tried to write (a function that a row-level "
                    "security policy, a view or a trigger of the table calls); reaper reads "
                    f"in read-only transactions, so nothing was written: {self._redact(line)}"
                ) from exc
            finally:
                with self._lent_lock:
                    self._lent.discard(conn)

    @contextlib.contextmanager
    def helper_session(self) -> Iterator[Session]:
        """A session for one helper of a run's parallel heap walk
        (:func:`reaper.engine.batches.walk_heap`): a pooled connection, for which the pool
        grows by one while it is lent, so that a run's helpers never take a connection another
        run waits for, and never fail for want of one. Raises as :meth:`session` does."""
        self._resize_helpers(+1)
        try:
            with self.session() as session:
                yield session
        finally:
            self._resize_helpers(-1)

    def _resize_helpers(self, change: int) -> None:
        with self._helpers_lock:
            self._helpers += change
            self._pool.resize(1, self._max_connections + self._helpers)

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

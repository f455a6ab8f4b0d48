"""psycopg's errors as :mod:`reaper.errors`, and passwords scrubbed from every message.

Every statement reaper runs goes through :func:`translate_errors`: what crosses out of
:mod:`reaper.db` is one of reaper's own exceptions, its first line only, with any password of
the connection string scrubbed (:class:`_Redactor`), and the server's SQLSTATE and CONTEXT
line kept on it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import psycopg
import psycopg.errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout

from reaper import errors

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
            secrets += [
                a or b
                for a, b in re.findall(r"password\s*=\s*(?:'((?:[^'\\]|\\.)*)'?|(\S+))", dsn or "")
            ]
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
    except psycopg.errors.LockNotAvailable as exc:
        raise errors.LockTimeout(prefix + redact(_first_line(exc))) from exc
    except psycopg.errors.QueryCanceled as exc:
        raise _canceled_kind(exc)(prefix + redact(_first_line(exc))) from exc
    except (psycopg.errors.ForeignKeyViolation, psycopg.errors.RestrictViolation) as exc:
        # PostgreSQL 18 reports a delete that ON DELETE RESTRICT refuses as 23001
        # (restrict_violation), where earlier releases said 23503, as for NO ACTION.
        raise errors.ForeignKeyConflict(prefix + redact(_first_line(exc))) from exc
    except PoolTimeout as exc:
        raise errors.ConnectionFailed(prefix + redact(_first_line(exc))) from exc
    except psycopg.Error as exc:
        kind = error_kind(exc.sqlstate, connection_gone=_connection_gone(exc))
        raise kind(prefix + redact(_first_line(exc))) from exc


def _connection_gone(exc: psycopg.Error) -> bool:
    """True for an error raised by the client itself (no SQLSTATE) that says the connection
    cannot be used: libpq's own (a refused or lost connection, reaper's watchdog), or an
    operation on a closed connection."""
    return exc.sqlstate is None and isinstance(
        exc, psycopg.OperationalError | psycopg.InterfaceError
    )


# What an error says about the database, by its SQLSTATE (PostgreSQL's Appendix A). Only what
# stops every sweep is the connection's (ConnectionFailed: the readiness probe turns 503 on it
# besides a read-only server): the connection itself, its login, the server ending the
# session or running out of what every session needs.
CONNECTION_CLASSES = frozenset(
    {
        "08",  # connection exception
        "28",  # invalid authorization specification (password, pg_hba)
        "57",  # operator intervention: shutdown, crash, database dropped, idle timeouts (not 57014)
    }
)
CONNECTION_CODES = frozenset(
    {
        "53000",  # insufficient_resources
        "53200",  # out_of_memory
        "53300",  # too_many_connections
        "25P03",  # idle_in_transaction_session_timeout: the session was ended
        "3D000",  # invalid_catalog_name: the database does not exist (at connect)
    }
)
# A table's own: whatever its rows, the statement fails on it (TableProblem), and the
# run of its sweep fails without splitting the batch row by row; the other sweeps go on.
TABLE_CLASSES = frozenset(
    {
        "55",  # object not in prerequisite state (not 55P03, a lock wait: a row's or a table's)
        "58",  # system error: an I/O error on the table's files
        "XX",  # internal error: data or index corrupted
    }
)
TABLE_CODES = frozenset(
    {
        "53100",  # disk_full: the table's tablespace or temporary files
        "53400",  # configuration_limit_exceeded
    }
)
QUERY_CANCELED, LOCK_NOT_AVAILABLE = "57014", "55P03"
# Everything else is the statement's: a serialization failure or a deadlock (class 40,
# TransactionConflict), a syntax or access rule (42), an integrity constraint (23), a data
# exception (22), a program limit (54)...


def error_kind(
    sqlstate: str | None, *, connection_gone: bool = False
) -> type[errors.DatabaseError]:
    """The :mod:`reaper.errors` class of a database error by its SQLSTATE; ``connection_gone``
    for an error without one that says the connection cannot be used (libpq's own)."""
    if sqlstate is None:
        return errors.ConnectionFailed if connection_gone else errors.DatabaseError
    if sqlstate == QUERY_CANCELED:
        return errors.StatementCanceled
    if sqlstate == LOCK_NOT_AVAILABLE:
        return errors.LockTimeout
    if sqlstate in CONNECTION_CODES or sqlstate[:2] in CONNECTION_CLASSES:
        return errors.ConnectionFailed
    if sqlstate in TABLE_CODES or sqlstate[:2] in TABLE_CLASSES:
        return errors.TableProblem
    if sqlstate[:2] == "40":
        return errors.TransactionConflict
    return errors.DatabaseError


# SQLSTATE 57014 (query_canceled) has three causes, which only the server's message tells
# apart (ProcessInterrupts in PostgreSQL's postgres.c); a lock wait past lock_timeout raises
# 55P03 (lock_not_available) instead, its message as below.
_CANCEL_CAUSES: tuple[tuple[str, type[errors.StatementCanceled]], ...] = (
    ("due to statement timeout", errors.StatementTimeout),
    ("due to lock timeout", errors.LockTimeout),
    ("due to user request", errors.QueryCanceled),
)


def _canceled_kind(exc: psycopg.errors.QueryCanceled) -> type[errors.StatementCanceled]:
    """The kind of a query_canceled error, by the server's message; a message in another
    language (the server's lc_messages) counts as a statement timeout."""
    message = exc.diag.message_primary or str(exc)
    for words, kind in _CANCEL_CAUSES:
        if words in message:
            return kind
    return errors.StatementTimeout

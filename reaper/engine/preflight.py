"""Checks before any sweep runs: reaper's role is not a superuser, and every sweep's table
is one reaper can delete from.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from reaper import errors, sqltext
from reaper.config.sweeps import Sweep
from reaper.db import Database, Session, WhoAmI
from reaper.engine.execute import LOG_NAME, keep
from reaper.sqltext.names import TableName

log = structlog.get_logger(LOG_NAME)


def warn_if_superuser(db: Database) -> bool:
    """Log one warning when reaper's role is a superuser: it bypasses every grant and every
    row-level security policy, so nothing in the database limits what a sweep reads or
    deletes. True when it is (``reaper check`` fails then).

    Raises:
        DatabaseError: the role could not be read.
    """
    with db.session(read_only=True) as session:
        return warn_if_superuser_in(session)


def warn_if_superuser_in(session: Session) -> bool:
    """:func:`warn_if_superuser` on a session the caller holds (run-once's first checks).

    Raises:
        DatabaseError: the role could not be read.
    """
    superuser = session.fetch(WhoAmI, sqltext.ops("whoami"))[0].superuser
    if superuser:
        log.warning(
            "superuser_role",
            advice="run reaper as a role of its own that is not a superuser (see "
            "docs/security.md and grants.sql)",
        )
    return superuser


def refuse_unsweepable(session: Session, sweeps: Iterable[Sweep], *, trails: bool = False) -> None:
    """Check, before any sweep runs, that every sweep's table is one reaper can delete from
    (an ordinary table, or a partitioned or inheritance parent whose every member is one), and
    that a declared sweep reads only tables and columns of built-in types, and with
    ``trails`` (``run-once``) that the key columns and the archive table a sweep names exist
    and can take its rows: what :meth:`reaper.db.Session.statements` refuses, without
    composing the statements (the relations of a table that several sweeps delete from are
    read once).

    A table that does not exist is left to the run (which fails and says so).

    Raises:
        RelationRefused: the first sweep whose table is a view, a foreign table, a
            materialized view ... or covers one, or whose archive cannot take its rows; the
            message names the table and why.
        DatabaseError: the catalog could not be read.
    """
    read: set[TableName] = set()
    missing: set[TableName] = set()
    for sweep in sweeps:
        if sweep.table in missing:
            continue
        trail = keep(sweep) if trails and (sweep.archive is not None or sweep.key) else None
        try:
            session.refuse_unsweepable(sweep.predicate, trail, relations=sweep.table not in read)
        except errors.ObjectMissing:
            missing.add(sweep.table)
            continue
        except errors.RelationRefused as exc:
            raise errors.RelationRefused(f"sweep {sweep.name}: {exc}") from None
        read.add(sweep.table)

"""The database: the only package that imports psycopg.

It owns the connection pool (:mod:`.pool`), the value that says how to connect and the
session settings every reaper session is pinned to (:mod:`.pinning`), the connection string,
read once and never shown (:mod:`.dsn`), the watchdog every reaper connection carries
(:mod:`.connection`), the composition of a sweep's statements
(:mod:`.statements`), the catalog queries (:mod:`.catalog`), the advisory locks
(:mod:`.locks`), one sweep run's session (:mod:`.session`), the rows it reads as typed
dataclasses (:mod:`.rows`), and the translation of psycopg's errors into
:mod:`reaper.errors`, any password scrubbed from the message (:mod:`.errors`).

The rest of reaper imports from here (``from reaper.db import Database``), never from the
modules.
"""

from __future__ import annotations

from reaper.db.connection import utc_instant
from reaper.db.dsn import describe_dsn, describe_target, parse_dsn
from reaper.db.errors import _Redactor, dsn_has_password, error_kind
from reaper.db.locks import LockHolder, advisory_lock_key
from reaper.db.pinning import ConnectionSettings
from reaper.db.pool import Database
from reaper.db.rows import (
    BrokenIndex,
    Cascade,
    DeleteObstacle,
    ForeignKey,
    IndexLookup,
    IndexState,
    Relation,
    Sample,
    Standby,
    TableColumn,
    TableLeaf,
    TableOwner,
    TableSpace,
    TableStatus,
    VisibleRows,
    WalMark,
    WhoAmI,
    XminHolder,
)
from reaper.db.session import Session
from reaper.db.statements import (
    KEYSET_START,
    MIN_HEAP_WALK_VERSION,
    BatchRows,
    Heap,
    HeapStatements,
    Keep,
    SweepStatements,
    Trail,
    compose_relations,
    regclass_text,
    table_identifier,
)

__all__ = [
    "KEYSET_START",
    "MIN_HEAP_WALK_VERSION",
    "BatchRows",
    "BrokenIndex",
    "Cascade",
    "ConnectionSettings",
    "Database",
    "DeleteObstacle",
    "ForeignKey",
    "Heap",
    "HeapStatements",
    "IndexLookup",
    "IndexState",
    "Keep",
    "LockHolder",
    "Relation",
    "Sample",
    "Session",
    "Standby",
    "SweepStatements",
    "TableColumn",
    "TableLeaf",
    "TableOwner",
    "TableSpace",
    "TableStatus",
    "Trail",
    "VisibleRows",
    "WalMark",
    "WhoAmI",
    "XminHolder",
    "_Redactor",
    "advisory_lock_key",
    "compose_relations",
    "describe_dsn",
    "describe_target",
    "dsn_has_password",
    "error_kind",
    "parse_dsn",
    "regclass_text",
    "table_identifier",
    "utc_instant",
]

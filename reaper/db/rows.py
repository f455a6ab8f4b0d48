"""Rows read from the database, as typed frozen dataclasses (psycopg's ``class_row``): one
field per column the statement returns, named as the statement names it.

Read with :meth:`reaper.db.Session.fetch`, e.g. ``session.fetch(TableColumn,
sqlfiles.ops("table_columns"), {"table": ...})``. A statement and its row class change
together: a column the class lacks (or a field the statement does not return) fails the
first fetch with a ``TypeError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class WhoAmI:
    """The connected role and server (``ops/whoami.sql``)."""

    role_name: str
    superuser: bool
    server_version: int
    can_create_temp: bool
    can_create_in_public: bool
    database: str


@dataclass(frozen=True)
class TableLeaf:
    """One heap of a table: the table itself, or a leaf partition (``ops/table_leaves.sql``).

    ``estimated_rows`` is ``pg_class.reltuples`` (-1: never analyzed); ``blocks`` its heap
    blocks now."""

    relname: str
    estimated_rows: int
    blocks: int


@dataclass(frozen=True)
class TableColumn:
    """A column of a table (``ops/table_columns.sql``); ``base_type`` is a domain's base
    type's name, else the type's own; ``generated``: a generated column."""

    column_name: str
    column_type: str
    base_type: str
    generated: bool = False


@dataclass(frozen=True)
class TableOwner:
    """A table's owner, and whether the connected role acts as it (``ops/table_owner.sql``)."""

    owner: str
    acts_as_owner: bool


@dataclass(frozen=True)
class TableStatus:
    """A table's size and vacuum times, summed over its leaves (``ops/table_status.sql``).

    ``estimated_rows`` -1 when never analyzed; ``total_bytes`` with indexes and TOAST; the
    tuple counts and vacuum times None where the statistics have none."""

    estimated_rows: int
    total_bytes: int
    live_tuples: int | None
    dead_tuples: int | None
    last_vacuum: datetime | None
    last_autovacuum: datetime | None


@dataclass(frozen=True)
class TableSpace:
    """Whether a table's dead rows are being reclaimed, summed over its leaves
    (``ops/table_space.sql``).

    ``dead_rows`` is ``n_dead_tup`` (None: no statistics); ``autovacuum_threshold`` the dead
    rows past which autovacuum vacuums it; ``autovacuum_enabled`` False when the server's
    ``autovacuum`` or ``track_counts`` is off or the table's ``autovacuum_enabled`` is false;
    ``last_vacuum`` the latest VACUUM or autovacuum (None: never)."""

    dead_rows: int | None
    autovacuum_threshold: int
    autovacuum_enabled: bool
    last_vacuum: datetime | None
    autovacuum_count: int | None


@dataclass(frozen=True)
class XminHolder:
    """The oldest holder of one kind of the database's xmin horizon
    (``ops/xmin_holders.sql``).

    Attributes:
        kind: a :class:`reaper.vocab.HorizonHolder` value.
        name: a session's pid, a prepared transaction's gid, a slot's or a standby's name.
        xmin_age: how many transactions old its xmin is (``age(xmin)``).
        since: when its transaction began (a session: ``xact_start``; a prepared
            transaction: ``prepared``); None for a slot or a standby, and for a session whose
            details this role may not read (another role's, without pg_read_all_stats).
        user_name, application_name, state: where known.
    """

    kind: str
    name: str
    xmin_age: int
    since: datetime | None
    user_name: str | None
    application_name: str | None
    state: str | None


@dataclass(frozen=True)
class IndexState:
    """An index named by a sweep (``ops/index_state.sql``); the other fields are None when
    it is not ``present``."""

    name: str
    present: bool
    index_name: str | None
    table_name: str | None
    valid: bool
    ready: bool
    definition: str | None


@dataclass(frozen=True)
class BrokenIndex:
    """An index that is not valid and ready on a table a sweep reads
    (``ops/broken_indexes.sql``); ``building`` while a CREATE INDEX CONCURRENTLY runs."""

    index_name: str
    table_name: str
    valid: bool
    ready: bool
    definition: str
    building: bool


@dataclass(frozen=True)
class IndexLookup:
    """An index of a table, by name (``ops/index_lookup.sql``)."""

    oid: int
    schema_name: str
    index_name: str
    valid: bool
    ready: bool
    building: bool


@dataclass(frozen=True)
class ForeignKey:
    """A foreign key that references a swept table (``ops/foreign_keys.sql``); ``indexed``
    when a valid index leads with its ``columns``."""

    constraint_name: str
    referencing_table: str
    columns: list[str]
    indexed: bool


@dataclass(frozen=True)
class Cascade:
    """A foreign key ``ON DELETE CASCADE`` that a delete from a swept table reaches, at
    ``depth`` 1 (it references the table) or deeper (it references a table a cascade
    reaches) (``ops/cascades.sql``).

    ``per_row``: the rows of ``referencing_table`` one deleted row of the swept table takes
    with it on average, from the catalog's estimates (None: a table never analyzed, or a
    table that cascades to itself, whose depth no estimate tells).
    """

    depth: int
    constraint_name: str
    referencing_table: str
    referenced_table: str
    to_itself: bool
    estimated_rows: int | None
    per_row: float | None


@dataclass(frozen=True)
class Privilege:
    """Whether the role holds ``privilege`` on ``table_name`` (``ops/privileges.sql``)."""

    table_name: str
    privilege: str
    granted: bool


@dataclass(frozen=True)
class Relation:
    """A relation a sweep's table covers: itself and its inheritance children and
    partitions at any depth (``engine/heaps.sql``).

    ``relkind`` is ``pg_class.relkind``; ``declared`` is the sweep's own table;
    ``delete_rule`` a rule ON DELETE rewrites its deletes; ``estimated_rows`` and
    ``analyzed_blocks`` from ``pg_class`` (-1 / 0: never analyzed); ``blocks`` its heap
    blocks now (0 for anything but an ordinary table)."""

    oid: int
    schema: str
    name: str
    relkind: str
    declared: bool
    delete_rule: bool
    estimated_rows: int
    analyzed_blocks: int
    blocks: int


@dataclass(frozen=True)
class DeleteObstacle:
    """What can keep a DELETE on a heap from removing the rows it names
    (``engine/delete_obstacles.sql``): ``kind`` is ``trigger``, ``rule`` or ``policy``
    (:class:`reaper.vocab.ObstacleKind`); ``name`` the trigger's, rule's or policies' names;
    ``detail`` one line that names it and its table."""

    kind: str
    name: str
    detail: str


@dataclass(frozen=True)
class VisibleRows:
    """Whether row-level security filters what the role reads of a heap, the catalog's
    estimate of its rows (-1: never analyzed) and its blocks now (``ops/visible_rows.sql``)."""

    filtered: bool
    estimated_rows: int
    blocks: int


@dataclass(frozen=True)
class DeclaredRead:
    """A (relation, column) a declared sweep's predicate reads, as the catalog describes it
    (``engine/declared_reads.sql``)."""

    relation: str
    column_name: str
    relkind: str | None
    present: bool
    builtin_type: bool
    type_name: str


@dataclass(frozen=True)
class Standby:
    """One row of ``pg_stat_replication``.

    Attributes:
        name: its application_name (else client address, else walsender pid).
        visible: False when this role may not read the row's columns (needs pg_monitor or
            pg_read_all_stats): its lag is unknown.
        replay_lsn: WAL position replayed, in bytes (None: unknown).
        replay_lag: ``replay_lag`` in seconds (None: NULL, unknown or caught up and idle).
    """

    name: str
    visible: bool = True
    replay_lsn: int | None = None
    replay_lag: float | None = None


@dataclass(frozen=True)
class Sample:
    """What the pacer measures before a batch.

    Attributes:
        wal_lsn: the primary's current WAL position in bytes (None: the server is a standby).
        standbys: every standby streaming from it.
        busy_sessions: other client sessions of the swept database that ran a statement within
            the window the caller gives (reaper's own sessions excluded).
        hidden_sessions: client sessions of the database whose state this role may not read.
        statements: for each other client session (reaper's own excluded) whose last
            statement ended within the window, ``(seconds it took, seconds since it ended)``
            as the server saw them (``pg_stat_activity``: from ``query_start`` to
            ``state_change``, its commit included); a statement still running counts as
            ``(seconds so far, 0.0)``.
    """

    wal_lsn: int | None = None
    standbys: tuple[Standby, ...] = ()
    busy_sessions: int = 0
    hidden_sessions: int = 0
    statements: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class WalMark:
    """A point in a session's WAL, and whether an earlier one is durable (sql/engine/wal_mark.sql).

    Attributes:
        mark: the WAL insert position now (``pg_lsn`` text), past every commit made so far.
        started: the server incarnation it belongs to (its postmaster's start time, text).
        same_server: the earlier mark asked about is of this incarnation (True when none
            was asked about): WAL positions of another one are not comparable.
        durable: the earlier mark asked about is flushed on the server and on every physical
            standby that reports its flush position (True when none was asked about).
    """

    mark: str
    started: str
    same_server: bool
    durable: bool

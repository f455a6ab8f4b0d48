"""A sweep's statements, composed once from the engine's SQL templates (``sql/engine/``) and
its composed predicate (:class:`reaper.sqltext.declared.Predicate`: a
:class:`psycopg.sql.Composable` and its cutoff parameter names); identifiers always through
:class:`psycopg.sql.Identifier`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from reaper import sqltext
from reaper.sqltext.declared import Predicate
from reaper.sqltext.names import TableName

# TID range scans (the heap walk) arrived in PostgreSQL 14; older servers use the index path.
MIN_HEAP_WALK_VERSION = 140000
# A row's key when its table has no primary key and the sweep declares none: its tuple id
# (valid only until the row is gone; a declared key names a row for good).
TID_KEY = "ctid"

# The pieces of first_eligible.sql that differ between the statements that read the first
# eligible rows: what they select, and the tuple ids a run skipped (left out of its batches).
_CTID = sql.SQL("ctid")
_ONE = sql.SQL("1")
_NOTHING = sql.SQL("")
_NOT_SKIPPED = sql.SQL(" AND ctid <> ALL (%(skip)s::tid[])")
_LIMIT = sql.Placeholder("limit")
_ALL = sql.SQL("ALL")


def first_eligible(
    predicate: Predicate,
    *,
    columns: sql.Composable,
    relation: sql.Composable,
    limit: sql.Composable = _LIMIT,
    also: sql.Composable = _NOTHING,
    arm_limit: sql.Composable | None = None,
) -> sql.Composed:
    """``SELECT columns FROM relation WHERE predicate [also] LIMIT limit``: the first
    ``limit`` rows the predicate matches, in no order (``first_eligible.sql``). A predicate
    with :attr:`~reaper.sqltext.declared.Predicate.arms` is read arm by arm
    (``first_eligible_arms.sql``): each arm's first ``limit`` rows in its age's order, an
    ordered range of its own index that stops after ``limit`` entries, then UNION ALL (the
    arms are disjoint), at most ``limit`` in all. ``also``: more of the WHERE clause
    (`` AND ...``) or nothing. ``arm_limit``: each arm's own limit, when not ``limit``."""
    parts = {"columns": columns, "relation": relation, "limit": limit, "also": also}
    if not predicate.arms:
        return sql.SQL(sqltext.engine("first_eligible")).format(predicate=predicate.where, **parts)
    arm = sqltext.engine("first_eligible_arm")
    each = dict(parts, limit=limit if arm_limit is None else arm_limit)
    arms = sql.SQL(" UNION ALL ").join(
        sql.SQL(arm).format(arm=a.where, age=a.age, **each) for a in predicate.arms
    )
    return sql.SQL(sqltext.engine("first_eligible_arms")).format(arms=arms, limit=limit)


# The keyset's bound on the age (index_keyset_batch.sql): from the greatest age the run's
# last batch selected, that age included (rows of the same age that the LIMIT left out).
_KEYSET = " AND ({}) >= %(keyset)s::timestamptz"
# The keyset of a run's first index batch: before every age.
KEYSET_START = "-infinity"


def _table(table: TableName) -> TableName:
    if not isinstance(table, TableName):
        raise TypeError(f"a table reaches SQL as a TableName (its schema and name), not {table!r}")
    return table


def table_identifier(table: TableName) -> sql.Identifier:
    """The table as a quoted, schema-qualified identifier (never string formatting)."""
    return _table(table).identifier


def compose_relations(template: str, **relations: tuple[str, str]) -> sql.Composed:
    """``template`` (one statement with ``{slot}`` placeholders) with each slot filled by a
    ``(schema, name)`` relation, quoted as an identifier (never string formatting)."""
    return sql.SQL(template).format(**{k: sql.Identifier(*v) for k, v in relations.items()})


def regclass_text(table: TableName) -> str:
    """The table as text for a ``::regclass`` cast: schema-qualified, each part quoted the way
    :func:`table_identifier` quotes it (an unquoted name would be folded to lower case, and
    the catalog asked about another table than the one the sweep deletes from). A value (a
    parameter), never composed into SQL."""
    return _table(table).regclass


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
        declared: it is the sweep's table itself, not one of its partitions or children.

    Raises:
        TypeError: built by anything but :meth:`Session.heaps`.
    """

    oid: int
    schema: str
    name: str
    stats: TableStats
    declared: bool = False
    proof: object = field(repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.proof is not _CATALOG_PROOF:
            raise TypeError("a Heap is read from the catalog (Session.heaps), never built")

    @property
    def table(self) -> TableName:
        """The heap as a table name (how logs and required privileges name it)."""
        return TableName(self.schema, self.name)


@dataclass(frozen=True)
class Keep:
    """What a run asks its batches to keep of the rows they delete, besides their count.

    Attributes:
        keys: return each deleted row's key (for the ``batch_keys`` line).
        key: the sweep's declared key columns; empty: the table's primary key (its tuple id
            when it has none).
        archive: insert the deleted rows into this table, in each batch's statement.
        lines: return each deleted row as the text of a JSON object.
    """

    keys: bool = False
    key: tuple[str, ...] = ()
    archive: TableName | None = None
    lines: bool = False

    @property
    def rows(self) -> bool:
        """Whether the batches need every column of the rows they delete."""
        return self.archive is not None or self.lines


@dataclass(frozen=True)
class Trail:
    """A :class:`Keep` resolved against the catalog (:meth:`Session.statements`).

    Attributes:
        keys: the key columns each batch returns (empty: none).
        columns: every column of the swept table, in order (archive and lines; else empty).
        archive: the table the deleted rows go to, or None.
        lines: whether each batch returns its rows as JSON text.
    """

    keys: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    archive: TableName | None = None
    lines: bool = False

    @property
    def active(self) -> bool:
        """Whether the batches return or archive anything besides their counts."""
        return bool(self.keys) or self.archive is not None or self.lines


def _trail_parts(trail: Trail) -> dict[str, sql.Composable]:
    """The {returning}, {archive} and {trail} slots of a batch statement (heap_batch.sql)."""
    if not trail.active:
        return {
            "returning": _ONE,
            "archive": _NOTHING,
            "trail": sql.SQL(sqltext.engine("trail_columns")).format(
                keys=sql.SQL("NULL::json"), lines=sql.SQL("NULL::text[]")
            ),
        }
    # Each column once: a key column is also one of the row's columns.
    returned = list(dict.fromkeys((*trail.keys, *trail.columns)))
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in trail.columns)
    keys: sql.Composable = sql.SQL("NULL::json")
    if trail.keys:
        # A key of one column as its value, not a json_build_array per row: bench B1's sweep
        # at debug level took 3.04 s of server CPU this way, 3.74 s the other.
        each = sql.SQL(", ").join(sql.Identifier("g", c) for c in trail.keys)
        if len(trail.keys) > 1:
            each = sql.SQL("json_build_array({})").format(each)
        keys = sql.SQL("(SELECT json_agg({}) FROM gone AS g)").format(each)
    lines: sql.Composable = sql.SQL("NULL::text[]")
    if trail.lines:
        lines = sql.SQL(
            "(SELECT array_agg(row_to_json(r)::text) FROM (SELECT {} FROM gone) AS r)"
        ).format(columns)
    archive: sql.Composable = _NOTHING
    if trail.archive is not None:
        archive = sql.SQL(sqltext.engine("trail_archive")).format(
            archive=_table(trail.archive).identifier, columns=columns
        )
    return {
        "returning": sql.SQL(", ").join(sql.Identifier(c) for c in returned),
        "archive": archive,
        "trail": sql.SQL(sqltext.engine("trail_columns")).format(keys=keys, lines=lines),
    }


class HeapStatements:
    """The statements that delete one sweep's garbage from one :class:`Heap`.

    ``alias`` is the declared table's name, so that a predicate that names its columns as
    ``table.column`` reads the same in every heap. ``trail``: what each batch returns and
    archives of the rows it deletes, in the statement that deletes them.
    """

    def __init__(self, heap: Heap, predicate: Predicate, trail: Trail | None = None) -> None:
        self.heap = heap
        self.trail = trail or Trail()
        kept = _trail_parts(self.trail)
        parts = {
            "heap": sql.Identifier(heap.schema, heap.name),
            "alias": sql.Identifier(predicate.table.name),
            "predicate": predicate.where,
        }

        def compose(name: str, **more: sql.Composable) -> sql.Composed:
            return sql.SQL(sqltext.engine(name)).format(**parts, **more)

        def bare(name: str) -> sql.Composed:
            """A bare DELETE (no result but its row count), or with a trail, that DELETE
            returning and archiving its rows (trail_batch.sql)."""
            if not self.trail.active:
                return compose(name)
            return sql.SQL(sqltext.engine("trail_batch")).format(delete=compose(name), **kept)

        # The index path's victims: the first eligible rows of this heap alone, not skipped.
        only = sql.SQL("ONLY {} AS {}").format(parts["heap"], parts["alias"])

        def victims(limit: sql.Composable) -> sql.Composed:
            return first_eligible(
                predicate, columns=_CTID, relation=only, limit=limit, also=_NOT_SKIPPED
            )

        # The index path with a keyset (index_keyset_batch.sql): for a predicate of one age
        # and one range (no arms), each batch's victims in the age's order, from where the
        # run's last batch stopped. None where the predicate has several ages or arms.
        self.index_keyset_batch: sql.Composed | None = None
        self.keyset_victims: sql.Composed | None = None
        self.keyset_first_victim: sql.Composed | None = None
        if len(predicate.ages) == 1 and not predicate.arms:
            age = predicate.ages[0]

            def keyed(limit: sql.Composable) -> sql.Composed:
                return sql.SQL(sqltext.engine("first_eligible_arm")).format(
                    columns=sql.SQL("ctid, ({})::timestamptz AS key").format(age),
                    relation=only,
                    arm=predicate.where,
                    age=age,
                    limit=limit,
                    also=sql.Composed([_NOT_SKIPPED, sql.SQL(_KEYSET).format(age)]),
                )

            self.index_keyset_batch = compose("index_keyset_batch", victims=keyed(_LIMIT), **kept)
            self.keyset_victims = compose("index_first_victim", victims=keyed(_LIMIT))
            self.keyset_first_victim = compose("index_first_victim", victims=keyed(sql.Literal(1)))
        self.lock_heap = compose("lock_heap")
        self.heap_batch = compose("heap_batch", **kept)
        self.heap_range_batch = bare("heap_range_batch")
        self.index_batch = compose("index_batch", victims=victims(_LIMIT), **kept)
        self.heap_first_victim = compose("heap_first_victim")
        self.index_first_victim = compose("index_first_victim", victims=victims(sql.Literal(1)))
        self.delete_row = bare("delete_row")
        self.row_versions = compose("row_versions")
        self.count_eligible = compose("heap_count_eligible")
        self.count_rows = compose("heap_count_rows")
        self.sample_eligible = compose("sample_eligible")


class SweepStatements:
    """A sweep's statements, composed once from the engine templates and its predicate.

    The table goes through :class:`psycopg.sql.Identifier`; the predicate is composed by
    reaper (:mod:`reaper.sqltext.declared`), never SQL text of a config file. The statements
    that delete are per heap (``heaps``, from :meth:`Session.statements`); those that only
    read (backlog, oldest row, plans) read the declared table, which covers the same rows.
    """

    def __init__(
        self, predicate: Predicate, *, heaps: Sequence[Heap] = (), trail: Trail | None = None
    ) -> None:
        table = predicate.table
        where = predicate.where
        cutoff_param = predicate.cutoffs[0] if predicate.cutoffs else "cutoff"
        self.predicate = predicate
        self.table = table
        self.trail = trail or Trail()
        self.heaps = tuple(HeapStatements(h, predicate, self.trail) for h in heaps)
        # The declared table is one of its own heaps: an ordinary table, which has no
        # partitions (a relation's kind never changes), so a run reads no partition tree.
        self.ordinary = any(h.declared for h in heaps)
        parts = {"table": table_identifier(table), "predicate": where}
        # What a batch reads, planned over the declared table (reaper check): one victims
        # query through the predicate's index (each arm's), across every heap the table covers.
        self.index_plan = sql.SQL(sqltext.engine("index_plan")).format(
            victims=first_eligible(
                predicate,
                columns=_CTID,
                relation=parts["table"],
                limit=sql.Placeholder("batch_size"),
            ),
        )
        self.count_eligible = sql.SQL(sqltext.engine("count_eligible")).format(**parts)
        self.estimate_eligible = sql.SQL(sqltext.engine("estimate_eligible")).format(**parts)
        self._parts = parts
        self.backlog_rows = sql.SQL(sqltext.engine("backlog_rows")).format(
            eligible=first_eligible(predicate, columns=_ONE, relation=parts["table"]),
        )
        self.backlog_oldest: sql.Composed | None = None
        if predicate.since is not None:
            since = sql.SQL("({})::timestamptz AS since").format(predicate.since)
            # Each arm's first row in its age's order is its oldest (its age is the "since"
            # of its rows): one row per arm makes the gauge exact, whatever --backlog-limit.
            oldest = first_eligible(
                predicate,
                columns=since,
                relation=parts["table"],
                **({"limit": _ALL, "arm_limit": sql.Literal(1)} if predicate.arms else {}),
            )
            self.backlog_oldest = sql.SQL(sqltext.engine("backlog_oldest")).format(
                eligible=oldest,
                cutoff=sql.Placeholder(cutoff_param),
            )
        self.sample_eligible = sql.SQL(sqltext.engine("sample_eligible")).format(
            heap=parts["table"],
            alias=sql.Identifier(table.name),
            predicate=where,
        )

    @property
    def tables_read(self) -> tuple[TableName, ...]:
        """The swept table, then every other table the predicate reads."""
        return self.predicate.tables_read

    def oldest_eligible(self) -> sql.Composed | None:
        """``SELECT least(min(age), ...) FROM table WHERE predicate`` over the expressions the
        predicate compares with a cutoff (None when it names none); with arms, the least of
        each arm's ``min(age)`` over that arm's rows, each served by its own index."""
        if not self.predicate.ages:
            return None

        def oldest_of(where: sql.Composable, ages: Sequence[sql.Composable]) -> sql.Composed:
            mins = sql.SQL(", ").join(sql.SQL("min(({})::timestamptz)").format(e) for e in ages)
            return sql.SQL(sqltext.engine("oldest_of")).format(
                mins=mins, table=self._parts["table"], predicate=where
            )

        sources = (
            [oldest_of(a.where, [a.age]) for a in self.predicate.arms]
            if self.predicate.arms
            else [oldest_of(self.predicate.where, self.predicate.ages)]
        )
        return sql.SQL(sqltext.engine("oldest_eligible")).format(oldest=sql.SQL(", ").join(sources))

    def required_privileges(self) -> list[tuple[TableName, str]]:
        """``(table, privilege)`` pairs the batches need: SELECT on every table read, DELETE on
        the swept table, INSERT on its archive table. No UPDATE: batches take no row lock
        (``FOR UPDATE``) and can change no row. PostgreSQL checks a partition's or an
        inheritance child's own privileges when it is named directly, as every batch names
        its heap: each heap needs SELECT and DELETE too."""
        need = [(self.table, p) for p in ("SELECT", "DELETE")]
        for h in self.heaps:
            if h.heap.table != self.table:
                need += [(h.heap.table, p) for p in ("SELECT", "DELETE")]
        need += [(t, "SELECT") for t in self.tables_read[1:]]
        if self.trail.archive is not None:
            need.append((self.trail.archive, "INSERT"))
        return need


@dataclass(frozen=True)
class BatchRows:
    """What one batch did: rows ``deleted``, rows ``selected`` as victims (more than deleted
    when a concurrent transaction changed a victim so that the predicate no longer holds),
    and the ``last`` tuple id selected, ``(block, offset)`` (heap walk only; None when none).
    With a :class:`Trail`: ``keys``, each deleted row's key values (in the trail's key
    columns' order), and ``lines``, each deleted row as a JSON object's text. ``key``: the
    greatest age an index batch with a keyset selected, as text (None otherwise, or when it
    selected none): where the run's next batch starts."""

    deleted: int
    selected: int
    last: tuple[int, int] | None = None
    keys: tuple[tuple[Any, ...], ...] = ()
    lines: tuple[str, ...] = ()
    key: str | None = None


def parse_tid(text: str) -> tuple[int, int]:
    """``'(12,3)'`` -> ``(12, 3)``."""
    block, offset = text.strip("()").split(",")
    return int(block), int(offset)


def tid_text(tid: tuple[int, int]) -> str:
    """``(12, 3)`` -> ``'(12,3)'``, for a ``::tid`` parameter."""
    return f"({tid[0]},{tid[1]})"

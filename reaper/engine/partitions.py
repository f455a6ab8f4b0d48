"""Partition retention: drop the partitions whose every row is past the cutoff, before the
row batches sweep what is left (the partition that straddles the cutoff, and the newer ones).

A partition is dropped only when its bounds prove that every row in it is eligible under the
sweep's whole predicate (docs/partitions.md writes the proof down):

- the predicate, parsed with PostgreSQL's own parser (pglast), is one bound of a plain
  column by a cutoff (``created_at < %(cutoff)s``), or an AND of such bounds of that one
  column; anything else (an OR, a status test, a function, a cast, a subquery) proves nothing;
- the table is range-partitioned on that column alone; a partition's upper bound, read from
  the catalog and compared with the cutoff by PostgreSQL in the sweep's own session, lies at
  or below the cutoff (every row of a range partition is below its upper bound; NULL keys
  only ever go to the DEFAULT partition, which is never dropped);
- nothing makes a drop differ from the deletes: no foreign key references the table, no
  DELETE trigger or rule, no row-level security, no publication of its deletes.

A partition that is itself partitioned on the same column is judged by its own partitions
when its bound proves nothing; on another column, it is left to the row batches.

Dropping is ``DETACH PARTITION ... CONCURRENTLY`` (plain DETACH before PostgreSQL 14 or
beside a DEFAULT partition) then ``DROP TABLE``, each under the session's lock_timeout and
statement_timeout. A detach left pending by an interrupted run is finished (``FINALIZE``) by
the next one. Each partition's step fails or waits on its own: PostgreSQL allows one pending
detach per parent, so while one waits for older snapshots (its FINALIZE, or a detach whose
second half gave up at lock_timeout), the other partitions of that parent wait for a later
run (``partition_detach_waiting``), their rows left to the row batches; the run goes on.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from reaper import sqltext
from reaper.config.engine import FULL_TABLE_MIN_ROWS
from reaper.db import Session, regclass_text
from reaper.sqltext import sqlinfo
from reaper.sqltext.names import TableName
from reaper.vocab import (
    CheckStatus,
    PartitionAction,
    PartitionRefusal,
)

if TYPE_CHECKING:
    from reaper.config.sweeps import Sweep

log = structlog.get_logger("reaper.partitions")

# What a sweep does with a partition wholly past its cutoff (setting partition_action).
DROP, DETACH, OFF = PartitionAction.DROP, PartitionAction.DETACH, PartitionAction.OFF

# (column < $p), (column <= $p), and the same written the other way round.
_UPPER_OPS = {"<", "<="}
_LOWER_OPS = {">", ">="}


class NotProven(ValueError):
    """The predicate does not prove that every row below a bound of one column is eligible."""


@dataclass(frozen=True)
class KeyBound:
    """What a provable predicate says: a row is eligible when ``column`` is below each of the
    cutoffs ``params`` (so, below the least of them).

    Attributes:
        column: the swept table's column, as PostgreSQL names it (unquoted names folded).
        params: the cutoff parameter names it is compared with, without repeats.
    """

    column: str
    params: tuple[str, ...]

    def cutoff(self, cutoffs: Mapping[str, datetime]) -> datetime:
        """The least of this bound's cutoffs (absolute instants, compared exactly).

        Raises:
            KeyError: a parameter that ``cutoffs`` lacks.
        """
        return min(cutoffs[p] for p in self.params)


@functools.cache
def key_bound(table: str, predicate: str) -> KeyBound:
    """Read ``predicate`` (over ``table``) as an AND of upper bounds of one column by cutoffs.

    Accepted conjuncts: ``col < %(p)s``, ``col <= %(p)s``, ``%(p)s > col``, ``%(p)s >= col``,
    with ``col`` a plain column of the table (unqualified or qualified by the table's name)
    and ``p`` a bare parameter. Pure: no database.

    Raises:
        NotProven: why not, in one line (an OR, another column, a cast, a function ...).
    """
    try:
        select, names = sqlinfo.parse_select(predicate, table)
    except sqlinfo.PredicateSyntaxError as exc:
        raise NotProven(f"the predicate does not parse: {exc}") from None
    where: Any = getattr(select, "whereClause", None)
    relname = table.split(".")[-1]
    columns: list[str] = []
    params: list[str] = []
    for conjunct in _conjuncts(where):
        column, param = _bound(conjunct, table, relname)
        columns.append(column)
        params.append(names[param - 1])
    if len(set(columns)) != 1:
        raise NotProven(
            f"the predicate bounds several columns ({', '.join(dict.fromkeys(columns))})"
        )
    return KeyBound(columns[0], tuple(dict.fromkeys(params)))


def _conjuncts(node: Any) -> Iterator[Any]:
    # pglast is imported where a predicate is parsed: a built-in's proof ships as data.
    from pglast import ast
    from pglast.enums import BoolExprType

    if isinstance(node, ast.BoolExpr):
        if node.boolop != BoolExprType.AND_EXPR:
            kind = "an OR" if node.boolop == BoolExprType.OR_EXPR else "a NOT"
            raise NotProven(
                f"the predicate has {kind}: only an AND of bounds of one column "
                "proves a whole partition eligible"
            )
        for arg in node.args or ():
            yield from _conjuncts(arg)
    else:
        yield node


def _bound(node: Any, table: str, relname: str) -> tuple[str, int]:
    """``(column, parameter number)`` of one conjunct that bounds a column by a cutoff."""
    from pglast import ast
    from pglast.enums import A_Expr_Kind

    if not isinstance(node, ast.A_Expr) or node.kind != A_Expr_Kind.AEXPR_OP:
        raise NotProven("the predicate has a condition other than column < cutoff")
    op_name = [getattr(n, "sval", "") for n in node.name or ()]
    if (len(op_name) == 2 and op_name[0] != "pg_catalog") or len(op_name) not in (1, 2):
        raise NotProven("the predicate compares with an operator outside pg_catalog")
    op = op_name[-1]
    column_node: Any
    param_node: Any
    if op in _UPPER_OPS:
        column_node, param_node = node.lexpr, node.rexpr
    elif op in _LOWER_OPS:
        column_node, param_node = node.rexpr, node.lexpr
    else:
        raise NotProven(f"the predicate has a condition other than column < cutoff ({op})")
    if not isinstance(param_node, ast.ParamRef) or not isinstance(column_node, ast.ColumnRef):
        raise NotProven("the predicate has a condition other than a plain column < a bare cutoff")
    fields = list(column_node.fields or ())
    if not fields or not all(isinstance(f, ast.String) for f in fields):
        raise NotProven("the predicate has a condition other than column < cutoff")
    parts = [str(f.sval) for f in fields]
    qualifier = ".".join(parts[:-1])
    if len(parts) > 1 and qualifier not in (relname, table):
        raise NotProven(f"the predicate bounds {'.'.join(parts)}, a column of another table")
    return parts[-1], int(param_node.number or 0)


@dataclass(frozen=True)
class Partition:
    """One partition below the swept table, as ``sql/partitions/tree.sql`` reads it.

    Attributes:
        relid, parent: the partition's and its parent's pg_class oids.
        level: 1 for the swept table's own partitions, 2 for theirs, and so on.
        schema_name, relname, parent_schema, parent_name: names, for the DDL and the logs.
        kind: pg_class.relkind (``r`` a table, ``p`` partitioned itself, ``f`` foreign).
        estimated_rows: pg_class.reltuples (-1: never analyzed); 0 for a partitioned one.
        heap_bytes: pg_relation_size (0 for a partitioned one).
        strategy, key_columns, key_column, key_type: the parent's partition key.
        bound: the bound as PostgreSQL prints it (``FOR VALUES FROM (...) TO (...)``).
        is_default, detach_pending, owned, parent_has_default: as named.
        expired: True when the upper bound lies at or below the cutoff (None: not judged).
    """

    relid: int
    parent: int
    level: int
    schema_name: str
    relname: str
    kind: str
    estimated_rows: int
    heap_bytes: int
    parent_schema: str
    parent_name: str
    strategy: str
    key_columns: int
    key_column: str | None
    key_type: str | None
    bound: str
    is_default: bool
    detach_pending: bool
    owned: bool
    parent_has_default: bool
    expired: bool | None

    @property
    def name(self) -> str:
        """``schema.relname``."""
        return f"{self.schema_name}.{self.relname}"

    @property
    def parent_qualified(self) -> str:
        """The parent's ``schema.relname``."""
        return f"{self.parent_schema}.{self.parent_name}"


@dataclass(frozen=True)
class Refused:
    """Why none of the partitions wholly past the cutoff may be removed.

    Attributes:
        kind: what stands in the way (the role does not own one, a drop would differ from
            deleting the rows, the full-table interlock).
        reason: one line that says so.
    """

    kind: PartitionRefusal
    reason: str

    def __str__(self) -> str:
        return self.reason


@dataclass
class Plan:
    """What partition retention would do to one sweep's table now.

    Attributes:
        partitioned: the table is partitioned at all.
        proof: why partitions may be dropped (the bound) or the reason none may.
        drop: the partitions wholly past the cutoff, outermost first, with their estimated
            rows (a partitioned one: the sum over its leaves).
        pending: partitions left detach-pending.
        heap_bytes: relid -> heap bytes of the partition and everything below it.
        refused: why none of ``drop`` may go (not owner, a foreign key ...), or None.
    """

    partitioned: bool = False
    proof: KeyBound | None = None
    reason: str = ""
    drop: list[tuple[Partition, int]] = field(default_factory=list)
    pending: list[Partition] = field(default_factory=list)
    refused: Refused | None = None
    heap_bytes: dict[int, int] = field(default_factory=dict)


def droppable(p: Partition) -> bool:
    """The partition's own bound proves every row in it past the cutoff, and dropping it
    drops its rows: a table or a partitioned table, never a DEFAULT partition (whose rows
    have no bound) nor a foreign table (whose rows live elsewhere)."""
    return bool(p.expired) and not p.is_default and p.kind in ("r", "p")


def _read_tree(
    session: Session, table: TableName, column: str | None, cutoff: datetime | None
) -> list[Partition]:
    return session.fetch(
        Partition,
        sqltext.strip_comments(sqltext.read("partitions/tree.sql")),
        {"table": regclass_text(table), "column": column, "cutoff": cutoff},
    )


def _proof(sweep: Sweep) -> KeyBound:
    """The partition proof of ``sweep``'s predicate: read from a built-in's reviewed text (as
    the package keeps it read, :attr:`Predicate.proof`), or given by a declaration whose only
    rule is one age column without filters.

    Raises:
        NotProven: why not, in one line.
    """
    predicate = sweep.predicate
    if isinstance(predicate.proof, str):
        raise NotProven(predicate.proof)
    if predicate.proof is not None:
        return KeyBound(*predicate.proof)
    if predicate.text is not None:
        return key_bound(sweep.table, predicate.text)
    if predicate.key_column is None:
        raise NotProven(
            "the declaration has filters, references, several rules or age columns: only one "
            "age column alone proves a whole partition eligible"
        )
    return KeyBound(predicate.key_column, predicate.cutoffs)


def plan(session: Session, sweep: Sweep, cutoffs: Mapping[str, datetime]) -> Plan:
    """What partition retention would do to ``sweep``'s table with ``cutoffs``: read from the
    catalog in the sweep's session (its TimeZone is the one the batches compare under).

    The full-table interlock holds for drops as for the batches: when the partitions to drop
    hold at least ``max_eligible_fraction`` of the table's heap bytes (a table of
    FULL_TABLE_MIN_ROWS rows or more by the catalog), none is dropped.

    Raises:
        DatabaseError: the catalog could not be read.
    """
    out = Plan()
    try:
        out.proof = _proof(sweep)
    except NotProven as exc:
        out.reason = str(exc)
    cutoff = out.proof.cutoff(cutoffs) if out.proof is not None else None
    tree = _read_tree(session, sweep.table, out.proof.column if out.proof else None, cutoff)
    if not tree:
        return out
    out.partitioned = True
    out.pending = [p for p in tree if p.detach_pending]
    if out.proof is None:
        return out
    if not any(p.strategy == "r" and p.key_column == out.proof.column for p in tree):
        first = tree[0]
        out.reason = (
            f"the table is not range-partitioned on {out.proof.column} alone at any level "
            f"(strategy {first.strategy}, {first.key_columns} key column(s)"
            + (f", key {first.key_column}" if first.key_column else "")
            + ")"
        )
        return out
    leaves: dict[int, list[Partition]] = {}
    for p in tree:
        leaves.setdefault(p.parent, []).append(p)

    def estimate(p: Partition) -> int:
        if p.kind != "p":
            return max(p.estimated_rows, 0)
        return sum(estimate(c) for c in leaves.get(p.relid, ()))

    def size(p: Partition) -> int:
        return p.heap_bytes + sum(size(c) for c in leaves.get(p.relid, ()))

    out.heap_bytes = {p.relid: size(p) for p in tree}

    chosen: set[int] = set()
    pending: set[int] = set()
    for p in tree:  # level by level: a partition under a chosen one goes with it
        if p.parent in chosen:
            chosen.add(p.relid)
            continue
        if p.detach_pending or p.parent in pending:
            pending.add(p.relid)  # finished first (FINALIZE), judged as a whole then
            continue
        if droppable(p):
            chosen.add(p.relid)
            out.drop.append((p, estimate(p)))
    candidates = [p for p, _ in out.drop] + [p for p in out.pending if droppable(p)]
    if candidates:
        obstacles = [
            str(v)
            for v in session.values(
                sqltext.strip_comments(sqltext.read("partitions/obstacles.sql")),
                {"table": regclass_text(sweep.table)},
            )
        ]
        not_owned = [p.name for p in candidates if not p.owned]
        if obstacles:
            out.refused = Refused(
                PartitionRefusal.OBSTACLE,
                f"a drop would differ from deleting the rows: {obstacles[0]}",
            )
        elif not_owned:
            role = session.scalar(sqltext.ops("current_role"))
            out.refused = Refused(
                PartitionRefusal.NOT_OWNER,
                f"role {role} does not own {not_owned[0]} or its parent (detaching and "
                "dropping a partition needs ownership)",
            )
    if out.refused is None and out.drop:
        too_much = _interlock(tree, out.drop, sweep.max_eligible_fraction)
        if too_much is not None:
            out.refused = Refused(PartitionRefusal.FULL_TABLE, too_much)
    if out.refused is None and not out.drop and not out.reason:
        out.reason = "no partition is wholly past the cutoff"
    return out


def _interlock(
    tree: list[Partition], drop: list[tuple[Partition, int]], max_fraction: float
) -> str | None:
    """Why the drops would empty (nearly) the whole table, or None. Measured in heap bytes,
    which need no ANALYZE; the row count (reltuples) only decides whether the table is large
    enough for the interlock to apply."""
    if max_fraction >= 1.0:
        return None
    rows = sum(max(p.estimated_rows, 0) for p in tree)
    total = sum(p.heap_bytes for p in tree if not p.detach_pending)
    children: dict[int, list[Partition]] = {}
    for p in tree:
        children.setdefault(p.parent, []).append(p)

    def size(p: Partition) -> int:
        return p.heap_bytes + sum(size(c) for c in children.get(p.relid, ()))

    dropped = sum(size(p) for p, _ in drop)
    # A leaf never analyzed (reltuples -1) could hold any number of rows: the interlock holds.
    unknown = any(p.estimated_rows < 0 and p.heap_bytes > 0 for p in tree)
    small = rows < FULL_TABLE_MIN_ROWS and not unknown
    if small or total <= 0 or dropped / total < max_fraction:
        return None
    return (
        f"the partitions wholly past the cutoff hold {dropped / total:.0%} of the table, at "
        f"least max_eligible_fraction ({max_fraction:g}): is the retention right? Raise "
        "max_eligible_fraction for this sweep to allow it"
    )


def check(
    session: Session, sweep: Sweep, cutoffs: Mapping[str, datetime]
) -> list[tuple[CheckStatus, str, str, str | None]]:
    """``reaper check``'s findings on partition retention for ``sweep``, as
    ``(status, subject, detail, fix)`` with status ``pass``, ``warn`` or ``fail``: a
    detach left pending (fail: FINALIZE repairs it), partitions wholly past the cutoff that
    the role may not drop (fail), and why a partitioned table's partitions are not dropped
    (pass). Empty for a table that is not partitioned.

    Raises:
        DatabaseError: the catalog could not be read.
    """
    action = sweep.partition_action
    found = plan(session, sweep, cutoffs)
    if not found.partitioned:
        return []
    out: list[tuple[CheckStatus, str, str, str | None]] = []
    for p in found.pending:
        out.append(
            (
                CheckStatus.FAIL,
                p.name,
                f"a detach of {p.name} from {p.parent_qualified} was "
                "interrupted (detach pending); the next run finishes it",
                f"ALTER TABLE {TableName(p.parent_schema, p.parent_name).sql_text} DETACH "
                f"PARTITION {TableName(p.schema_name, p.relname).sql_text} FINALIZE",
            )
        )
    names = ", ".join(p.name for p, _ in found.drop)
    if action == OFF:
        out.append(
            (
                CheckStatus.PASS,
                sweep.table,
                "partition_action is off: rows are swept in batches",
                None,
            )
        )
    elif found.refused is not None:
        owner_only = found.refused.kind == PartitionRefusal.NOT_OWNER
        status = CheckStatus.FAIL if owner_only else CheckStatus.WARN
        fix = (
            f"run reaper as the owner of {sweep.table} and its partitions, or set "
            'partition_action = "off"'
            if status == CheckStatus.FAIL
            else None
        )
        out.append(
            (
                status,
                sweep.table,
                f"would {action} {names} but {found.refused.reason}; their rows are swept in "
                "batches",
                fix,
            )
        )
    elif found.drop:
        out.append(
            (
                CheckStatus.PASS,
                sweep.table,
                f"would {action} {names} (wholly past the cutoff)",
                None,
            )
        )
    else:
        out.append((CheckStatus.PASS, sweep.table, f"no partition dropped: {found.reason}", None))
    return out

"""What a sweep deletes beyond its own table: the rows that ``ON DELETE CASCADE`` foreign
keys take with each row it deletes, at any depth, as ``check`` and the dry run name them.

Deleting 100,000 parents whose children cascade removes the children too, in the same
statement, and no count of reaper's own includes them. The figures are the catalog's
estimates (``pg_class.reltuples``, ``sql/ops/cascades.sql``): the average number of rows of each
referencing table per row of the table it references.
"""

from __future__ import annotations

from collections.abc import Sequence

from reaper import errors, sqltext
from reaper.config.sweeps import Sweep
from reaper.db import Cascade, Database, Session, regclass_text
from reaper.sqltext.names import TableName


def cascades(session: Session, table: TableName) -> list[Cascade]:
    """The cascading foreign keys a delete from ``table`` reaches, in path order.

    Raises:
        DatabaseError: the catalog could not be read.
    """
    return session.fetch(Cascade, sqltext.ops("cascades"), {"table": regclass_text(table)})


def per_row(c: Cascade) -> float | None:
    """Rows of ``c.referencing_table`` that one deleted row of the swept table takes with it,
    on average (None: not known)."""
    return None if c.to_itself else c.per_row


def describe(c: Cascade, deleted: int | None = None, *, named: bool = True) -> str:
    """One cascade, for a line: the rows it takes of which table, and (``named``) through
    which foreign key: about ``deleted`` times its rows per row when ``deleted`` is given (a
    dry run's count), else per deleted row."""
    through = f"through {c.referenced_table}" if c.depth > 1 else ""
    via = ", ".join(p for p in (f"ON DELETE CASCADE {c.constraint_name}" * named, through) if p)
    ratio = per_row(c)
    if c.to_itself:
        amount = "rows that reference the deleted ones, to any depth"
    elif ratio is None:
        amount = "an unknown number of rows (never analyzed)"
    elif deleted is not None:
        amount = f"about {round(ratio * deleted):,} rows"
    else:
        amount = f"about {ratio:,.1f} rows per deleted row"
    return f"{amount} of {c.referencing_table}" + (f" ({via})" if via else "")


def summary(found: Sequence[Cascade], deleted: int | None = None) -> str:
    """Every cascade of ``found`` in one phrase (``; ``-separated), or "" for none."""
    return "; ".join(describe(c, deleted) for c in found)


def estimated(c: Cascade, deleted: int) -> int | None:
    """The rows of ``c.referencing_table`` that deleting ``deleted`` rows of the swept table
    takes with it, by the catalog's average (None: not known)."""
    ratio = per_row(c)
    return None if ratio is None else round(ratio * deleted)


def as_dict(c: Cascade, deleted: int | None = None) -> dict[str, object]:
    """JSON-ready: the referencing table, its foreign key, its depth, rows per deleted row,
    and, given ``deleted``, the rows it would take."""
    return {
        "table": c.referencing_table,
        "constraint": c.constraint_name,
        "depth": c.depth,
        "rows_per_deleted_row": per_row(c),
        "estimated_rows": None if deleted is None else estimated(c, deleted),
    }


def of_sweeps(db: Database, sweeps: Sequence[Sweep]) -> dict[str, list[Cascade]]:
    """The cascades of each sweep's table, by sweep name (a sweep whose table's cascades could
    not be read has none: ``check`` says why).

    Raises:
        ConnectionFailed: the database cannot be reached.
    """
    out: dict[str, list[Cascade]] = {}
    with db.session(read_only=True) as session:
        for sweep in sweeps:
            try:
                out[sweep.name] = cascades(session, sweep.table)
            except errors.DatabaseError:
                out[sweep.name] = []
    return out

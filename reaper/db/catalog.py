"""What a session reads from the catalog: the heaps a table covers (and the relations reaper
refuses), privileges, table sizes, the read-only state."""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql

from reaper import errors, sqltext
from reaper.db.queries import Queries
from reaper.db.rows import DeclaredRead, Privilege, Relation, TableColumn
from reaper.db.statements import (
    _CATALOG_PROOF,
    TID_KEY,
    Heap,
    Keep,
    SweepStatements,
    TableStats,
    Trail,
    regclass_text,
)
from reaper.sqltext.declared import Predicate
from reaper.sqltext.names import TableName, sql_name

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


class Catalog(Queries):
    """The catalog queries of a :class:`reaper.db.Session`."""

    def write_refusal(self) -> tuple[str | None, bool]:
        """Why the server would refuse reaper's deletes now, and whether new sessions would see
        another ``default_transaction_read_only`` than this one.

        Returns:
            ``(reason, stale)``: ``reason`` None when the server accepts writes; ``stale``
            True when this session's read-only default differs from the one a new session of
            this role would get now (an ALTER DATABASE/ROLE ... SET since it connected).
        """
        with self._errors(), self._conn.cursor() as cur:
            cur.execute(sql.SQL(sqltext.ops("write_refusal")))
            row = cur.fetchone()
        assert row is not None
        return (None if row[0] is None else str(row[0])), bool(row[1])

    def _describe_missing(self, needed: Sequence[tuple[TableName, str]]) -> str | None:
        try:
            missing = self.missing_privileges(needed)
            role = self.scalar(sqltext.ops("current_role"))
        except errors.DatabaseError:
            return None
        if not missing:
            return None
        grants = "; ".join(
            f"GRANT {p} ON {t.sql_text} TO {sql_name(str(role))}" for t, p in missing
        )
        what = ", ".join(f"{p} on table {t}" for t, p in missing)
        return f"role {role} lacks {what} (grant it: {grants}; see {sqltext.where('grants.sql')})"

    def missing_privileges(
        self, needed: Sequence[tuple[TableName, str]]
    ) -> list[tuple[TableName, str]]:
        """The ``(table, privilege)`` pairs of ``needed`` that the current role lacks; UPDATE
        counts as held when granted on at least one column. Tables that do not exist are
        skipped."""
        quoted = {regclass_text(t): t for t, _ in needed}
        rows = self.fetch(
            Privilege,
            sqltext.ops("privileges"),
            {"tables": [regclass_text(t) for t, _ in needed], "privileges": [p for _, p in needed]},
        )
        return [(quoted[r.table_name], r.privilege) for r in rows if not r.granted]

    def heaps(self, table: TableName) -> list[Heap]:
        """The heaps ``table`` covers, from the catalog: itself when it is an ordinary table,
        and every inheritance child and partition at any depth that is one. A partitioned
        table (or a partitioned child) has no heap of its own and adds none.

        Raises:
            ObjectMissing: no such table.
            RelationRefused: ``table``, or a relation it covers, is of a kind reaper cannot
                delete rows from by tuple id (a view, a foreign table, a materialized view,
                ...): names it and says why.
        """
        rows = self.fetch(
            Relation, sqltext.engine("heaps"), {"table": regclass_text(table)}, context=table
        )
        out: list[Heap] = []
        for r in rows:
            kind = r.relkind
            if kind == "p":
                continue
            if kind != "r":
                why = REFUSED_KINDS.get(kind, f"a relation of kind {kind!r}")
                where = "is" if r.declared else f"covers {r.schema}.{r.name}, which is"
                raise errors.RelationRefused(
                    f"table {table} {where} {why}; reaper deletes only from ordinary tables "
                    "(and the partitions and inheritance children of one)"
                )
            if r.delete_rule:
                where = "has" if r.declared else f"covers {r.schema}.{r.name}, which has"
                raise errors.RelationRefused(
                    f"table {table} {where} a rule ON DELETE: a rule rewrites a DELETE into "
                    "other statements, so the rows a batch selected would not be the rows it "
                    "deletes; drop the rule or sweep the table the rule writes to"
                )
            stats = TableStats(r.estimated_rows, r.analyzed_blocks, r.blocks)
            out.append(
                Heap(r.oid, r.schema, r.name, stats, declared=r.declared, proof=_CATALOG_PROOF)
            )
        return out

    def statements(self, predicate: Predicate, keep: Keep | None = None) -> SweepStatements:
        """A sweep's statements for its table, from its composed predicate: its deletes
        composed per heap it covers (:meth:`heaps`), keeping what ``keep`` asks of the rows
        they delete (:meth:`trail`).

        Raises:
            ObjectMissing: no such table, or what :meth:`trail` names.
            RelationRefused: a relation reaper cannot delete from by tuple id, or an archive
                that cannot take the table's rows.
        """
        heaps = self.heaps(predicate.table)
        self._refuse_declared_reads(predicate)
        trail = self.trail(predicate.table, keep) if keep is not None else None
        return SweepStatements(predicate, heaps=heaps, trail=trail)

    def refuse_unsweepable(
        self, predicate: Predicate, keep: Keep | None = None, *, relations: bool = True
    ) -> None:
        """What :meth:`statements` refuses of ``predicate`` and ``keep``, without composing
        anything: the relations its table covers (:meth:`heaps`; not with ``relations``
        False, when the caller has already read them for another sweep of the table), the
        declared reads, and what ``keep`` names (:meth:`trail`: the key columns, the
        archive table).

        Raises:
            ObjectMissing: no such table.
            RelationRefused: as :meth:`statements`; a key column or an archive table that
                does not exist too (the table does).
        """
        if relations:
            self.heaps(predicate.table)
        self._refuse_declared_reads(predicate)
        if keep is not None:
            try:
                self.trail(predicate.table, keep)
            except errors.ObjectMissing as exc:
                raise errors.RelationRefused(str(exc)) from None

    def columns(self, table: TableName) -> list[TableColumn]:
        """``table``'s columns, in order (none when it does not exist)."""
        return self.fetch(
            TableColumn,
            sqltext.ops("table_columns"),
            {"table": regclass_text(table)},
            context=table,
        )

    def trail(self, table: TableName, keep: Keep) -> Trail:
        """``keep`` resolved for ``table``: its key columns (the declared ones, else the
        primary key's, else the tuple id) and, for an archive or lines, all its columns.

        Raises:
            ObjectMissing: a declared key column the table lacks, or no archive table.
            RelationRefused: the archive is the table itself, or lacks one of its columns,
                or has one of another type or one that is generated.
        """
        columns = self.columns(table) if keep.key or keep.rows else []
        names = [c.column_name for c in columns]
        keys: tuple[str, ...] = ()
        if keep.keys:
            keys = (
                keep.key
                or tuple(
                    str(r["column_name"])
                    for r in self.rows(
                        sqltext.engine("key_columns"), {"table": regclass_text(table)}
                    )
                )
                or (TID_KEY,)
            )
        missing = [k for k in keep.key if k not in names]
        if missing:
            raise errors.ObjectMissing(
                f"table {table} has no column {missing[0]}, which the sweep's key names; "
                "fix the key or the schema"
            )
        if keep.archive is not None:
            self._refuse_archive(table, columns, keep.archive)
        return Trail(
            keys=keys,
            columns=tuple(names) if keep.rows else (),
            archive=keep.archive,
            lines=keep.lines,
        )

    def _refuse_archive(
        self, table: TableName, columns: Sequence[TableColumn], archive: TableName
    ) -> None:
        """Refuse an archive that cannot take every column of ``table``'s rows as they are."""
        if archive.regclass == table.regclass:
            raise errors.RelationRefused(
                f"table {table} is its own archive; archive it into another table"
            )
        theirs = {c.column_name: c for c in self.columns(archive)}
        if not theirs:
            raise errors.ObjectMissing(
                f"archive table {archive} does not exist; create it (CREATE TABLE "
                f"{archive.sql_text} (LIKE {table.sql_text}, archived_at timestamptz NOT NULL "
                "DEFAULT now())) and grant INSERT on it"
            )
        for c in columns:
            other = theirs.get(c.column_name)
            if other is None:
                raise errors.RelationRefused(
                    f"archive table {archive} has no column {c.column_name} of table {table}; "
                    f"add it (ALTER TABLE {archive.sql_text} ADD COLUMN {c.column_name} "
                    f"{c.column_type})"
                )
            if other.column_type != c.column_type:
                raise errors.RelationRefused(
                    f"archive table {archive} column {c.column_name} is {other.column_type}, "
                    f"not {c.column_type} as in table {table}; give it the same type"
                )
            if other.generated:
                raise errors.RelationRefused(
                    f"archive table {archive} column {c.column_name} is generated, so it "
                    "cannot keep the deleted row's value; make it a plain column"
                )

    def _refuse_declared_reads(self, predicate: Predicate) -> None:
        """Refuse a declared predicate that reads a relation other than a table, or a column
        whose type is not built in (see ``engine/declared_reads.sql``).

        Raises:
            RelationRefused: names the relation or the column, and why.
        """
        if not predicate.reads:
            return
        rows = self.fetch(
            DeclaredRead,
            sqltext.engine("declared_reads"),
            {
                "relations": [regclass_text(r) for r, _ in predicate.reads],
                "columns": [c for _, c in predicate.reads],
            },
            context=predicate.table,
        )
        for (relation, column), row in zip(predicate.reads, rows, strict=True):
            if row.relkind is not None and row.relkind not in ("r", "p"):
                raise errors.RelationRefused(
                    f"table {relation} is not a table (relkind {row.relkind!r}): a declared "
                    "sweep reads only tables, never views or other relations that run code"
                )
            if row.present and not row.builtin_type:
                raise errors.RelationRefused(
                    f"table {relation} column {column} is of type {row.type_name}, which is "
                    "not a built-in type: a declared sweep compares only columns of built-in "
                    "types (a user type's casts and operators run code)"
                )

    def storage_rows(self, tables: Sequence[TableName]) -> dict[TableName, int]:
        """The catalog's estimated rows of each existing table in ``tables``."""
        with self._errors(), self._conn.cursor() as cur:
            quoted = {regclass_text(t): t for t in tables}
            cur.execute(
                sql.SQL(sqltext.engine("storage_rows")),
                {"tables": list(quoted)},
            )
            return {quoted[str(name)]: int(n) for name, n in cur.fetchall()}

    def missing_tables(self, tables: Sequence[TableName]) -> list[TableName]:
        """The tables among ``tables`` that do not exist or that this role cannot see."""
        with self._errors(), self._conn.cursor() as cur:
            quoted = {regclass_text(t): t for t in tables}
            cur.execute(sql.SQL(sqltext.engine("missing_tables")), {"tables": list(quoted)})
            return [quoted[str(row[0])] for row in cur.fetchall()]

"""A session: one connection borrowed for one sweep run, with everything a run asks of the
database (the clock, the catalog, locks, the batches, the pacer's sample, plans)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.string import TextLoader

from reaper import errors, sqltext
from reaper.db.catalog import Catalog
from reaper.db.connection import utc_instant
from reaper.db.locks import AdvisoryLocks
from reaper.db.pinning import APPLICATION_NAME
from reaper.db.rows import DeleteObstacle, Sample, Standby, VisibleRows, WalMark
from reaper.db.statements import (
    KEYSET_START,
    BatchRows,
    HeapStatements,
    SweepStatements,
    compose_relations,
    parse_tid,
    tid_text,
)

# A batch waits at most this long for a row lock a writer holds (never longer than the
# session's lock_timeout): then it fails, and the runner splits it until the held row is
# alone. Far below deadlock_timeout (1 s by default), so reaper always gives up first.
BATCH_LOCK_TIMEOUT_MS = 5
# reaper check counts the rows a role can read under row-level security in a sample of about
# this many heap blocks (a few milliseconds; every block of a smaller heap).
VISIBLE_SAMPLE_BLOCKS = 300


# Called with what a batch did, after its statement and before its COMMIT.
BeforeCommit = Callable[[BatchRows], None]


# How much of a key's JSON text stands for a key too deep to parse.
UNPARSED_KEY_CHARS = 200


class _Unparsed(str):
    """The JSON text of a value nested deeper than Python's parser goes."""


def _keys(text: str | None, columns: int) -> tuple[tuple[Any, ...], ...]:
    """A batch's keys column (keys, trail_columns.sql: a JSON array's text) as one tuple per
    row: a key of one column comes as its value (whatever its type), a key of several as a
    list. A value nested deeper than Python's parser goes (a jsonb key 5,000 levels deep)
    is the start of its JSON text (UNPARSED_KEY_CHARS, then ``...``): the log line shows
    that, and the batch goes on."""
    values = _json_array(text)
    if columns == 1:
        return tuple((_shown(k),) for k in values)
    return tuple(
        tuple(_shown(v) for v in (_json_array(k) if isinstance(k, _Unparsed) else k))
        for k in values
    )


def _shown(value: Any) -> Any:
    if isinstance(value, _Unparsed):
        return str(value[: UNPARSED_KEY_CHARS - 3]) + "..."
    return value


def _json_array(text: str | None) -> list[Any]:
    """The elements of a JSON array's text, each as :func:`json.loads` reads it, or, where
    that raises RecursionError, as its own JSON text (an :class:`_Unparsed`)."""
    if text is None:
        return []
    try:
        out = json.loads(text)
        return out if isinstance(out, list) else [out]
    except RecursionError:
        pass
    values: list[Any] = []
    for element in _json_elements(text):
        try:
            values.append(json.loads(element))
        except RecursionError:
            values.append(_Unparsed(element))
    return values


def _json_elements(text: str) -> Iterator[str]:
    """The texts of a JSON array's top-level elements, found by one loop over its
    characters (no recursion, however deep the elements nest)."""
    depth, start, quoted, escaped = 0, 0, False, False
    for i, ch in enumerate(text):
        if quoted:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch in "[{":
            depth += 1
            if depth == 1:
                start = i + 1
        elif ch in "]}":
            depth -= 1
            if depth == 0 and text[start:i].strip():
                yield text[start:i].strip()
        elif ch == "," and depth == 1:
            yield text[start:i].strip()
            start = i + 1


# How an index batch with a keyset may read its heap: an ordered range of an index; and
# what its plan must not have: a sort of every eligible row, in every batch.
_ORDERED_SCANS = ("Index Scan", "Index Only Scan")
_SORTS = ("Sort", "Incremental Sort")


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan, from its top node down."""
    out = [plan]
    for child in plan.get("Plans", ()):
        out += _plan_nodes(child)
    return out


class _OverLimit(Exception):
    """A whole-range batch found more victims than its limit; it was rolled back."""


def _batch_settings(cur: psycopg.Cursor[Any], *, heap_walk: bool) -> None:
    """batch_settings.sql in the batch's transaction: the short lock wait for rows, and for
    a heap walk's batch, bitmap scans and hash and merge joins off."""
    cur.execute(
        sql.SQL(sqltext.engine("batch_settings")),
        {"lock_timeout_ms": BATCH_LOCK_TIMEOUT_MS, "heap_walk": heap_walk},
    )


class Session(Catalog, AdvisoryLocks):
    """One connection, borrowed from the pool for one sweep run. Not thread-safe.

    Every method runs its statement in its own short transaction (the connection is in
    autocommit mode and batches open an explicit transaction), and raises
    :class:`reaper.errors.DatabaseError` subclasses.
    """

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

    def explain(
        self,
        statement: sql.Composable,
        params: Mapping[str, Any],
        *,
        index_batch: bool = False,
        heap_batch: bool = False,
        context: str = "",
    ) -> dict[str, Any]:
        """The plan of ``statement`` with ``params`` (``EXPLAIN (FORMAT JSON)``, no run): the
        top node's dict (``Node Type``, ``Plans``, ``Relation Name``, ``Index Name`` ...).

        With ``index_batch`` it is planned as an index batch runs: after
        ``index_batch_settings.sql`` in the same transaction (sequential scans off), so a Seq
        Scan in the plan means no index can serve it. With ``heap_batch`` it is planned as a
        heap-walk batch runs: after ``batch_settings.sql`` (bitmap scans off).
        """
        query = sql.SQL(sqltext.ops("explain")).format(statement=statement)
        with self._errors(context), self._conn.transaction(), self._conn.cursor() as cur:
            if heap_batch:
                _batch_settings(cur, heap_walk=True)
            if index_batch:
                cur.execute(sql.SQL(sqltext.engine("index_batch_settings")))
            cur.execute(query, params)
            row = cur.fetchone()
        assert row is not None
        doc = row[0] if not isinstance(row[0], str) else json.loads(row[0])
        plan: dict[str, Any] = doc[0]["Plan"]
        return plan

    def drop_index_concurrently(self, schema: str, name: str) -> None:
        """``DROP INDEX CONCURRENTLY IF EXISTS schema.name`` (never blocks writers)."""
        query = sql.SQL(sqltext.ops("drop_index_concurrently")).format(
            index=sql.Identifier(schema, name)
        )
        self.execute(query)

    def wal_mark(self, earlier: str | None = None, started: str | None = None) -> WalMark:
        """A WAL mark past every commit this session made so far, and whether ``earlier`` (a
        mark made before on server incarnation ``started``, by this session or another) is
        durable: flushed on the server, and on its physical standbys (what a crash or a
        failover keeps). Batches commit with synchronous_commit off; their rows are counted
        once a mark past them is durable."""
        return self.fetch(
            WalMark, sqltext.engine("wal_mark"), {"lsn": earlier, "started": started}
        )[0]

    def now(self, pinned: datetime | None = None) -> datetime:
        """The database clock's now(), or ``pinned`` as the database reads it (tests), as a
        UTC instant (:func:`utc_instant`): the one reading from which cutoffs are computed.

        Raises:
            ValueError: ``pinned`` is naive.
        """
        value = self.scalar(
            sqltext.engine("now"), {"now": None if pinned is None else utc_instant(pinned)}
        )
        assert isinstance(value, datetime)
        return utc_instant(value)

    def estimate_eligible(self, stmts: SweepStatements, params: Mapping[str, Any]) -> float:
        """The planner's estimate of the rows the predicate matches (a plan, no scan)."""
        with self._sweep_errors(stmts), self._conn.cursor() as cur:
            cur.execute(stmts.estimate_eligible, params)
            row = cur.fetchone()
        assert row is not None
        doc = row[0] if not isinstance(row[0], str) else json.loads(row[0])
        return float(doc[0]["Plan"]["Plan Rows"])

    def sample_eligible(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
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

    def count_rows(self, stmts: SweepStatements) -> int:
        """Every row of the heaps a run deletes from, counted (a full scan of each).

        Raises:
            ReaperError: as :meth:`count_eligible` (a statement_timeout among them).
        """
        total = 0
        with self._sweep_errors(stmts):
            for hs in stmts.heaps:
                total += int(self.scalar(hs.count_rows))
        return total

    def oldest_eligible(self, stmts: SweepStatements, params: Mapping[str, Any]) -> datetime | None:
        """The least value of the expressions the predicate compares with a cutoff, among the
        rows it matches (None when no row matches, it compares none, or they are not
        timestamps)."""
        query = stmts.oldest_eligible()
        if query is None:
            return None
        with self._sweep_errors(stmts):
            value = self.scalar(query, params)
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
        range_first: bool = True,
        before_commit: BeforeCommit | None = None,
    ) -> BatchRows:
        """One heap-walk batch: delete the first ``limit`` garbage rows (in tuple id order) of
        heap ``hs`` from tuple id ``first`` to block ``end_block`` (excluded), minus ``skip``.

        With ``range_first`` the whole range is deleted in place first and rolled back when
        it held more than ``limit`` victims; without it (the runner's choice while deletes are
        expensive: the range form, which has no limit, would time out again and again) the
        range's first ``limit`` victims are selected and deleted at once.

        One transaction, no row lock: a row a writer holds fails the batch within
        ``BATCH_LOCK_TIMEOUT_MS``. Returns what it did; ``last`` is the last tuple id selected.
        ``before_commit``: called with what the batch did after its statement, before its
        COMMIT (an exception it raises rolls the batch back); never for a range rolled back.

        Raises:
            StatementTimeout: past statement_timeout (SQLSTATE 57014) or a row a writer held
                (55P03); nothing was deleted.
            DatabaseError: any other failure of the delete (a foreign key, a trigger), with
                its ``sqlstate``; nothing was deleted.
        """
        p = dict(
            params,
            first_tid=tid_text(first),
            end_tid=tid_text((end_block, 0)),
            limit=limit,
            skip=[tid_text(t) for t in skip],
        )
        # The whole range first (heap_range_batch.sql: the cheapest form), rolled back when it
        # held more than ``limit`` victims; then the range's first ``limit`` victims.
        # The heap's last range: a short batch ends its sweep, and commits flushed.
        ends = limit if end_block >= hs.heap.stats.blocks else None
        if range_first:
            try:
                return self._batch(
                    hs,
                    hs.heap_range_batch,
                    p,
                    stmts,
                    at_most=limit,
                    last_if_under=ends,
                    before_commit=before_commit,
                )
            except _OverLimit:
                pass
        return self._batch(
            hs, hs.heap_batch, p, stmts, last_if_under=ends, before_commit=before_commit
        )

    def empty_batch(
        self, stmts: SweepStatements, hs: HeapStatements, params: Mapping[str, Any]
    ) -> None:
        """One heap-walk batch of heap ``hs`` over no block (heap_range_batch.sql on an empty
        tuple-id range): it deletes nothing and costs what every batch costs whatever its
        rows (its round trips, the table's lock, the batch settings, the table's
        statement-level triggers, the commit). Raises as :meth:`delete_heap_batch`."""
        p = dict(params, first_tid=tid_text((0, 0)), end_tid=tid_text((0, 0)), skip=[])
        self._batch(hs, hs.heap_range_batch, p, stmts)

    def delete_index_batch(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
        limit: int,
        skip: Sequence[tuple[int, int]] = (),
        before_commit: BeforeCommit | None = None,
        keyset: str | None = None,
    ) -> BatchRows:
        """One index-served batch: delete at most ``limit`` garbage rows of heap ``hs``, minus
        ``skip``. One transaction, no row lock; raises and calls ``before_commit`` as
        :meth:`delete_heap_batch`. With ``keyset`` (the ``key`` of the run's last batch, or
        KEYSET_START) and a heap whose predicate has one age (``hs.index_keyset_batch``), the
        victims are the first in the age's order from that age on, and the result's ``key``
        is where the next batch starts."""
        p = dict(params, limit=limit, skip=[tid_text(t) for t in skip])
        stmt = hs.index_batch
        if keyset is not None and hs.index_keyset_batch is not None:
            stmt, p["keyset"] = hs.index_keyset_batch, keyset
        # A short batch ends the heap's sweep, and commits flushed.
        return self._batch(
            hs, stmt, p, stmts, index=True, last_if_under=limit, before_commit=before_commit
        )

    def keyset_served(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
        limit: int,
    ) -> bool:
        """Whether index batches of heap ``hs`` can keep a keyset (index_keyset_batch.sql):
        its predicate has one age and one range, and the plan of a batch's victims, made as
        an index batch is planned, reads the heap only through an ordered index range and
        sorts nothing. Where it would sort (no index on the age, or one in another order),
        each batch would sort every eligible row. Reads only (a plan, never a run); False
        when the plan fails."""
        if hs.keyset_victims is None:
            return False
        p = dict(params, limit=limit, skip=[], keyset=KEYSET_START)
        try:
            plan = self.explain(hs.keyset_victims, p, index_batch=True, context=str(hs.heap.table))
        except errors.DatabaseError:
            return False
        nodes = _plan_nodes(plan)
        if any(n["Node Type"] in _SORTS for n in nodes):
            return False
        reads = [n for n in nodes if n.get("Relation Name") == hs.heap.name]
        return bool(reads) and all(n["Node Type"] in _ORDERED_SCANS for n in reads)

    def first_victim(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
        skip: Sequence[tuple[int, int]] = (),
        first: tuple[int, int] | None = None,
        end_block: int | None = None,
        keyset: str | None = None,
    ) -> tuple[int, int] | None:
        """The tuple id of one garbage row of heap ``hs`` (not in ``skip``): the first of the
        range from ``first`` to ``end_block`` when given, else one found through the
        predicate's index (with ``keyset``: the first from that age on, as
        :meth:`delete_index_batch`). None when there is none. Reads only."""
        p: dict[str, Any] = dict(params, skip=[tid_text(t) for t in skip])
        if first is not None and end_block is not None:
            p.update(first_tid=tid_text(first), end_tid=tid_text((end_block, 0)))
            stmt = hs.heap_first_victim
        elif keyset is not None and hs.keyset_first_victim is not None:
            stmt, p["keyset"] = hs.keyset_first_victim, keyset
        else:
            stmt = hs.index_first_victim
        with self._sweep_errors(stmts), self._conn.transaction(), self._conn.cursor() as cur:
            if stmt is not hs.heap_first_victim:
                cur.execute(sql.SQL(sqltext.engine("index_batch_settings")))
            cur.execute(stmt, p)
            row = cur.fetchone()
        return parse_tid(str(row[0])) if row is not None and row[0] is not None else None

    def delete_row(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
        tid: tuple[int, int],
        before_commit: BeforeCommit | None = None,
    ) -> BatchRows:
        """Delete the row at ``tid`` of heap ``hs`` if the predicate still holds for it (0 or
        1 row deleted; 1 selected). One transaction; raises and calls ``before_commit`` as
        :meth:`delete_heap_batch`."""
        rows = self._batch(
            hs, hs.delete_row, dict(params, tid=tid_text(tid)), stmts, before_commit=before_commit
        )
        return BatchRows(max(rows.deleted, 0), 1, tid, rows.keys, rows.lines)

    def row_versions(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        tids: Sequence[tuple[int, int]],
    ) -> dict[tuple[int, int], str]:
        """The version (``xmin``, as text) of each row of heap ``hs`` at the tuple ids
        ``tids`` that holds one now; a tuple id that names no row is left out. Reads only."""
        if not tids:
            return {}
        with self._sweep_errors(stmts), self._conn.cursor() as cur:
            cur.execute(hs.row_versions, {"tids": [tid_text(t) for t in tids]})
            return {parse_tid(str(tid)): str(xmin) for tid, xmin in cur.fetchall()}

    def delete_obstacles(self, hs: HeapStatements) -> list[DeleteObstacle]:
        """What the catalog says can keep a DELETE on heap ``hs`` from removing the rows it
        names, for this role (``engine/delete_obstacles.sql``): BEFORE DELETE row triggers,
        rules ON DELETE, row-level security whose DELETE policies differ from its SELECT
        ones. Reads only."""
        return self.fetch(
            DeleteObstacle,
            sqltext.engine("delete_obstacles"),
            {"heap": hs.heap.oid},
            context=hs.heap.table,
        )

    def visible_rows(self, hs: HeapStatements) -> tuple[VisibleRows, int | None]:
        """Whether row-level security filters what this role reads of heap ``hs``, with the
        catalog's estimate of its rows; and when it does and the heap was analyzed, the rows
        the role can read, estimated from a block sample of about VISIBLE_SAMPLE_BLOCKS blocks
        (every block of a small heap: then exact). Reads only."""
        seen = self.fetch(
            VisibleRows, sqltext.ops("visible_rows"), {"heap": hs.heap.oid}, context=hs.heap.table
        )[0]
        if not seen.filtered or seen.estimated_rows < 0 or seen.blocks == 0:
            return seen, None
        percent = min(100.0, 100.0 * VISIBLE_SAMPLE_BLOCKS / seen.blocks)
        query = compose_relations(sqltext.ops("sampled_rows"), heap=(hs.heap.schema, hs.heap.name))
        with self._errors(hs.heap.table), self._conn.cursor() as cur:
            cur.execute(query, {"percent": percent})
            row = cur.fetchone()
        assert row is not None
        return seen, round(int(row[0]) * 100.0 / percent)

    def _batch(
        self,
        hs: HeapStatements,
        stmt: sql.Composed,
        params: Mapping[str, Any],
        stmts: SweepStatements,
        *,
        index: bool = False,
        at_most: int | None = None,
        last_if_under: int | None = None,
        before_commit: BeforeCommit | None = None,
    ) -> BatchRows:
        """Run one batch statement of heap ``hs`` in its own transaction, after the heap's
        table lock (lock_heap.sql, under the session's lock_timeout) and the batch settings;
        with ``at_most``, roll it back (raising _OverLimit) when it deleted more rows than
        that; then ``before_commit`` with what it did, before COMMIT; with
        ``last_if_under``, a batch that selected fewer rows ends the heap's sweep and its
        commit waits for its WAL flush (commit_flushed.sql), so that the run's deletes are
        known durable without waiting for the WAL writer. The statement returns one row
        ``(deleted, selected, last_tid, keys, lines)``, or none (a bare DELETE: its row
        count)."""
        self._require_own_session()
        # In pipeline mode: BEGIN, the settings and the batch go in one round trip, COMMIT in
        # a second (four round trips otherwise; on a loaded 2-core machine they were most of
        # the gap between a backlog sweep and one plain DELETE, bench B1).
        with (
            self._sweep_errors(stmts),
            self._conn.pipeline() as pipeline,
            self._conn.transaction(),
            self._conn.cursor() as cur,
        ):
            # The keys column as its text: _keys reads it, whatever its depth.
            cur.adapters.register_loader("json", TextLoader)
            cur.execute(hs.lock_heap)
            _batch_settings(cur, heap_walk=not index)
            if index:
                cur.execute(sql.SQL(sqltext.engine("index_batch_settings")))
            cur.execute(stmt, params)
            pipeline.sync()
            if cur.description is None:
                # A bare DELETE (heap_range_batch.sql): its row count is the rows deleted.
                result = BatchRows(cur.rowcount, cur.rowcount, None)
            else:
                row = cur.fetchone()
                assert row is not None
                result = BatchRows(
                    int(row[0]),
                    int(row[1]),
                    parse_tid(row[2]) if row[2] else None,
                    _keys(row[3], len(hs.trail.keys)),
                    tuple(row[4] or ()),
                    row[5] if len(row) > 5 else None,
                )
            if at_most is not None and result.deleted > at_most:
                raise _OverLimit  # rolls the transaction back: nothing was deleted
            if before_commit is not None:
                # Inside the transaction: what it raises rolls the batch back.
                before_commit(result)
            if last_if_under is not None and result.selected < last_if_under and result.deleted:
                cur.execute(sql.SQL(sqltext.engine("commit_flushed")))
        return result

    def backlog_rows(self, stmts: SweepStatements, params: Mapping[str, Any], limit: int) -> int:
        """The rows the predicate matches now, counted through its index, at most ``limit``.

        Runs like an index batch (after ``index_batch_settings.sql``, in one transaction): with
        ``LIMIT`` and an overestimated match count the planner would otherwise read the whole
        table (bench B5: 141-159 ms against 5-7 ms at limit 1,000 on 10,000,000 rows).
        """
        with self._sweep_errors(stmts), self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(sql.SQL(sqltext.engine("index_batch_settings")))
            cur.execute(stmts.backlog_rows, dict(params, limit=limit))
            row = cur.fetchone()
        return int(row[0]) if row is not None else 0

    def backlog_oldest_seconds(
        self, stmts: SweepStatements, params: Mapping[str, Any], limit: int
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
            cur.execute(sql.SQL(sqltext.engine("index_batch_settings")))
            cur.execute(stmts.backlog_oldest, dict(params, limit=limit))
            row = cur.fetchone()
        value = row[0] if row is not None else None
        return max(float(value), 0.0) if value is not None else 0.0

    def pacing_sample(self, busy_window: float) -> Sample:
        """What the pacer measures before a batch (``pacing_sample.sql``): the WAL position,
        the other sessions busy on this database within ``busy_window`` seconds, every
        standby's replay position and lag, and the latency of the other sessions' statements
        that ended within ``busy_window``."""
        with self._errors(), self._conn.cursor() as cur:
            cur.execute(
                sql.SQL(sqltext.engine("pacing_sample")),
                {"busy_window": busy_window, "application_name": APPLICATION_NAME},
            )
            row = cur.fetchone()
        if row is None:
            return Sample()
        wal, busy, hidden, standbys, statements = row
        if isinstance(standbys, str):
            standbys = json.loads(standbys)
        if isinstance(statements, str):
            statements = json.loads(statements)
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
            statements=tuple(
                (max(float(took), 0.0), max(float(ago), 0.0))
                for took, ago in statements
                if took is not None and ago is not None
            ),
        )

    def execute_script(self, name: str) -> None:
        """Run every statement of a shipped script (``schema.sql``, ``indexes.sql``), in one
        transaction of this session, pinned already (its own BEGIN and COMMIT left out)."""
        with self._errors(name), self._conn.transaction(), self._conn.cursor() as cur:
            for stmt in sqltext.body(name):
                cur.execute(sql.SQL(stmt))

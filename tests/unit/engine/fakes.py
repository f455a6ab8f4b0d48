"""An in-memory stand-in for a database session, for the engine's decisions.

:class:`FakeSession` satisfies :class:`reaper.engine.port.BatchSession`: its heaps are lists
of rows, each garbage or live, some of which a writer holds or a foreign key refuses; a
batch deletes its victims or raises the error PostgreSQL would, and costs time on a
:class:`FakeClock` (per block scanned and per row deleted), so that the engine's sizing sees
durations without waiting for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reaper import errors
from reaper.db import KEYSET_START, BatchRows, DeleteObstacle, Trail, WalMark
from reaper.db.statements import TableStats, parse_tid, tid_text
from reaper.sqltext.names import TableName

Tid = tuple[int, int]


@dataclass
class FakeClock:
    """Monotonic seconds that move only when a batch costs time."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass(frozen=True)
class FakeHeapRef:
    """What the engine reads of a heap (as :class:`reaper.db.Heap` offers it)."""

    schema: str
    name: str
    stats: TableStats
    oid: int = 0

    @property
    def table(self) -> TableName:
        return TableName(self.schema, self.name)


@dataclass
class FakeHeap:
    """One heap: ``rows`` by tuple id, True for garbage. ``held``: rows a writer holds (a
    delete of one waits past lock_timeout; the error names the row).
    ``held_in``: the relation the error names instead (a row of another table that a
    cascade reaches), so that the heap's own row is not named. ``refused``: rows a foreign
    key keeps (SQLSTATE 23503). ``kept``: rows a delete names and does not remove, without
    an error (a trigger that returns NULL, a policy). ``obstacles``: what the catalog says
    of it (:meth:`FakeSession.delete_obstacles`). ``versions``: each row's xmin (0 unless
    set). Costs: seconds per block a range scans, per row a batch deletes, and per batch."""

    name: str
    rows: dict[Tid, bool]
    blocks: int
    schema: str = "public"
    held: set[Tid] = field(default_factory=set)
    held_in: str | None = None
    refused: set[Tid] = field(default_factory=set)
    kept: set[Tid] = field(default_factory=set)
    obstacles: list[DeleteObstacle] = field(default_factory=list)
    versions: dict[Tid, int] = field(default_factory=dict)
    oid: int = 16384
    block_seconds: float = 0.0
    row_seconds: float = 0.0
    batch_seconds: float = 0.0

    @classmethod
    def of(
        cls, name: str, blocks: int, per_block: int, garbage: Iterable[Tid] = (), **kwargs: Any
    ) -> FakeHeap:
        """``blocks`` blocks of ``per_block`` live rows each, those in ``garbage`` garbage."""
        dead = set(garbage)
        rows = {(b, o): (b, o) in dead for b in range(blocks) for o in range(1, per_block + 1)}
        return cls(name, rows, blocks, **kwargs)

    @property
    def garbage(self) -> list[Tid]:
        return sorted(t for t, dead in self.rows.items() if dead)

    def ref(self) -> FakeHeapRef:
        """As the catalog describes the heap (analyzed: reltuples and relpages known)."""
        return FakeHeapRef(
            self.schema, self.name, TableStats(len(self.rows), self.blocks, self.blocks), self.oid
        )


@dataclass
class FakeHeapStatements:
    """A heap's statements as the engine passes them along: only ``heap`` and ``trail`` are
    read."""

    heap: FakeHeapRef
    fake: FakeHeap
    trail: Trail = field(default_factory=Trail)


@dataclass
class FakeStatements:
    """A sweep's statements: the heaps it deletes from."""

    heaps: tuple[FakeHeapStatements, ...]
    table: str = "public.nodes"


def statements(*heaps: FakeHeap) -> FakeStatements:
    return FakeStatements(tuple(FakeHeapStatements(h.ref(), h) for h in heaps))


@dataclass
class FakeSession:
    """A :class:`reaper.engine.port.BatchSession` over :class:`FakeHeap` s.

    ``calls`` counts each method called, by name; ``ranges`` lists each heap-walk batch's
    ``(first block, end block)``."""

    clock: FakeClock = field(default_factory=FakeClock)
    server_version: int = 150_000
    # ``(eligible, sampled)`` that sample_eligible answers per heap name; else the exact
    # fraction of the heap, scaled to the sample's percentage.
    samples: dict[str, tuple[int, int]] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    ranges: list[tuple[int, int]] = field(default_factory=list)
    # Statements that failed (each rolled back).
    failed: int = 0
    # Whether index batches may keep a keyset (keyset_served): the fake's age of a row is
    # its tuple id, and a key is a tuple id's text.
    keyset: bool = False
    # The keyset each index batch was given, in order (None: none).
    keysets: list[str | None] = field(default_factory=list)

    def _call(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def sample_eligible(
        self, stmts: Any, hs: Any, params: Mapping[str, Any], percent: float
    ) -> tuple[int, int]:
        self._call("sample_eligible")
        heap: FakeHeap = hs.fake
        if heap.name in self.samples:
            return self.samples[heap.name]
        share = percent / 100.0
        return round(len(heap.garbage) * share), round(len(heap.rows) * share)

    def count_eligible(self, stmts: Any, params: Mapping[str, Any]) -> int:
        self._call("count_eligible")
        return sum(len(hs.fake.garbage) for hs in stmts.heaps)

    def count_rows(self, stmts: Any) -> int:
        self._call("count_rows")
        return sum(len(hs.fake.rows) for hs in stmts.heaps)

    def _delete(self, heap: FakeHeap, victims: Sequence[Tid]) -> int:
        """Delete ``victims`` in one transaction, or raise as PostgreSQL would (nothing
        deleted then)."""
        self.clock.advance(heap.batch_seconds)
        for tid in victims:
            if tid in heap.held:
                exc: errors.DatabaseError = errors.LockTimeout(
                    "canceling statement due to lock timeout"
                )
                exc.sqlstate = "55P03"
                exc.server_context = (
                    f"while deleting tuple ({tid[0]},{tid[1]}) in "
                    f'relation "{heap.held_in or heap.name}"'
                )
                self.failed += 1
                raise exc
            if tid in heap.refused:
                exc = errors.ForeignKeyConflict(
                    f'update or delete on table "{heap.name}" violates foreign key constraint'
                )
                exc.sqlstate = "23503"
                self.failed += 1
                raise exc
        gone = [t for t in victims if t not in heap.kept]
        for tid in gone:
            del heap.rows[tid]
        self.clock.advance(heap.row_seconds * len(victims))
        return len(gone)

    def delete_heap_batch(
        self,
        stmts: Any,
        hs: Any,
        params: Mapping[str, Any],
        first: Tid,
        end_block: int,
        limit: int,
        skip: Sequence[Tid] = (),
        range_first: bool = True,
        before_commit: Any = None,
    ) -> BatchRows:
        self._call("delete_heap_batch")
        heap: FakeHeap = hs.fake
        self.ranges.append((first[0], end_block))
        self.clock.advance(heap.block_seconds * max(end_block - first[0], 0))
        victims = [t for t in heap.garbage if first <= t < (end_block, 0) and t not in skip]
        if range_first and len(victims) <= limit:
            n = self._delete(heap, victims)
            return BatchRows(n, n, None)
        victims = victims[:limit]
        n = self._delete(heap, victims)
        return BatchRows(n, len(victims), victims[-1] if victims else None)

    def empty_batch(self, stmts: Any, hs: Any, params: Mapping[str, Any]) -> None:
        self._call("empty_batch")
        self.clock.advance(hs.fake.batch_seconds)

    def keyset_served(self, stmts: Any, hs: Any, params: Mapping[str, Any], limit: int) -> bool:
        self._call("keyset_served")
        return self.keyset

    def _from_key(self, keyset: str | None) -> Tid:
        return (-1, -1) if keyset in (None, KEYSET_START) else parse_tid(str(keyset))

    def delete_index_batch(
        self,
        stmts: Any,
        hs: Any,
        params: Mapping[str, Any],
        limit: int,
        skip: Sequence[Tid] = (),
        before_commit: Any = None,
        keyset: str | None = None,
    ) -> BatchRows:
        self._call("delete_index_batch")
        self.keysets.append(keyset)
        heap: FakeHeap = hs.fake
        start = self._from_key(keyset)
        victims = [t for t in heap.garbage if t not in skip and t >= start][:limit]
        n = self._delete(heap, victims)
        key = tid_text(victims[-1]) if keyset is not None and victims else None
        return BatchRows(n, len(victims), None, key=key)

    def first_victim(
        self,
        stmts: Any,
        hs: Any,
        params: Mapping[str, Any],
        skip: Sequence[Tid] = (),
        first: Tid | None = None,
        end_block: int | None = None,
        keyset: str | None = None,
    ) -> Tid | None:
        self._call("first_victim")
        heap: FakeHeap = hs.fake
        for t in heap.garbage:
            if t in skip or t < self._from_key(keyset):
                continue
            if first is not None and end_block is not None and not first <= t < (end_block, 0):
                continue
            return t
        return None

    def wal_mark(self, earlier: str | None = None, started: str | None = None) -> WalMark:
        """Every commit durable at once (an in-memory table has no WAL)."""
        self._call("wal_mark")
        return WalMark("0/0", "start", True, True)

    def delete_row(
        self, stmts: Any, hs: Any, params: Mapping[str, Any], tid: Tid, before_commit: Any = None
    ) -> BatchRows:
        self._call("delete_row")
        heap: FakeHeap = hs.fake
        if not heap.rows.get(tid, False):
            return BatchRows(0, 1, tid)
        return BatchRows(self._delete(heap, [tid]), 1, tid)

    def row_versions(self, stmts: Any, hs: Any, tids: Sequence[Tid]) -> dict[Tid, str]:
        self._call("row_versions")
        heap: FakeHeap = hs.fake
        return {t: str(heap.versions.get(t, 0)) for t in tids if t in heap.rows}

    def delete_obstacles(self, hs: Any) -> list[DeleteObstacle]:
        self._call("delete_obstacles")
        heap: FakeHeap = hs.fake
        return list(heap.obstacles)

"""What the engine's decisions need of a database session, and nothing more.

:class:`BatchSession` is the narrow interface through which the batches, the strategy choice
and the full-table interlock reach the database: measure a heap, count, delete one batch,
find or delete one row, read a row's version and what can keep a delete from removing
its rows. :class:`reaper.db.Session` satisfies it (mypy checks that where the
runner hands its session to a run); a test can hand an in-memory fake instead and drive the
engine's decisions in milliseconds (tests/unit/engine/fakes.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from reaper.db import BatchRows, DeleteObstacle, HeapStatements, SweepStatements, WalMark


class BatchSession(Protocol):
    """One connection as a run's batches use it. Every method runs in its own short
    transaction and raises :class:`reaper.errors.DatabaseError` subclasses; a batch that
    raises deleted nothing."""

    @property
    def server_version(self) -> int:
        """The server's version number (``150004`` for 15.4)."""
        ...

    def sample_eligible(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
        percent: float,
    ) -> tuple[int, int]:
        """``(eligible, sampled)`` rows of a ``percent``-% block sample of heap ``hs``."""
        ...

    def count_eligible(self, stmts: SweepStatements, params: Mapping[str, Any]) -> int:
        """The rows the predicate matches now, over every heap of ``stmts``."""
        ...

    def count_rows(self, stmts: SweepStatements) -> int:
        """Every row of the heaps of ``stmts``."""
        ...

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
        before_commit: Callable[[BatchRows], None] | None = None,
    ) -> BatchRows:
        """Delete at most ``limit`` garbage rows of ``hs`` from tuple id ``first`` to block
        ``end_block`` (excluded), in tuple-id order, minus ``skip``; ``before_commit`` is
        called with what the batch did before its COMMIT."""
        ...

    def empty_batch(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
    ) -> None:
        """One heap-walk batch of ``hs`` over no block: what every batch costs whatever its
        rows."""
        ...

    def delete_index_batch(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
        limit: int,
        skip: Sequence[tuple[int, int]] = (),
        before_commit: Callable[[BatchRows], None] | None = None,
        keyset: str | None = None,
    ) -> BatchRows:
        """Delete at most ``limit`` garbage rows of ``hs`` found through the index, minus
        ``skip``; ``before_commit`` as for :meth:`delete_heap_batch`. With ``keyset``: the
        first in the age's order from that age on; the result's ``key`` is where the next
        batch starts."""
        ...

    def keyset_served(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
        limit: int,
    ) -> bool:
        """Whether the index batches of ``hs`` can keep a keyset across a run (an ordered
        index range serves their victims)."""
        ...

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
        """One garbage row's tuple id (the first of the range when given; with ``keyset``,
        from that age on), not in ``skip``; None when there is none."""
        ...

    def delete_row(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        params: Mapping[str, Any],
        tid: tuple[int, int],
        before_commit: Callable[[BatchRows], None] | None = None,
    ) -> BatchRows:
        """Delete the row at ``tid`` if the predicate still holds for it (0 or 1 deleted, 1
        selected, ``last`` the tid); ``before_commit`` as for :meth:`delete_heap_batch`."""
        ...

    def row_versions(
        self,
        stmts: SweepStatements,
        hs: HeapStatements,
        tids: Sequence[tuple[int, int]],
    ) -> dict[tuple[int, int], str]:
        """The version (xmin) of the row at each of ``tids`` that holds one now."""
        ...

    def delete_obstacles(self, hs: HeapStatements) -> list[DeleteObstacle]:
        """What the catalog says can keep a DELETE on ``hs`` from removing the rows it
        names (triggers, rules, row-level security)."""
        ...

    def wal_mark(self, earlier: str | None = None, started: str | None = None) -> WalMark:
        """A WAL mark past every commit so far, and whether ``earlier`` (made on server
        incarnation ``started``) is durable (flushed on the server and its standbys)."""
        ...

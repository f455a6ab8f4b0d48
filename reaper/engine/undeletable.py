"""Rows found undeletable, remembered across runs, so that a row is paid for once.

A row whose delete fails alone (a foreign key that refuses it, a trigger that raises for it,
a delete that runs past statement_timeout) costs the failed statements that isolate it. The
:class:`reaper.engine.run.Sweeper` keeps each such row here, per database and heap, by tuple
id and version (``xmin``), and its later runs leave it out of every batch without trying it:
while the same version of the row stands at the same tuple id (an update writes a new
version, with a new tuple id; a tuple id that vacuum freed and a new row took has another
xmin), and for at most REMEMBER_SECONDS (a row may become deletable without changing: the
row that referenced it deleted, a hold lifted elsewhere). A row a writer held is busy, not
undeletable: it is not remembered. docs/engine.md, "Rows that cannot be deleted".

Pure and thread-safe: times are the caller's monotonic seconds.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

# How long a row found undeletable is left out of this process's runs (seconds).
REMEMBER_SECONDS = 3600.0
# At most this many rows are remembered per heap: each is sent with every batch, and a
# heap with more undeletable rows than this has a problem to fix, not to remember.
MAX_ROWS_PER_HEAP = 10_000

Tid = tuple[int, int]


@dataclass(frozen=True)
class Remembered:
    """One undeletable row: its version (``xmin``), why its delete failed (a
    :class:`reaper.vocab.SkipReason`) and until when it is left out (monotonic seconds)."""

    xmin: str
    reason: str
    until: float


@dataclass
class UndeletableRows:
    """The undeletable rows of one database, per heap (its oid), by tuple id."""

    heaps: dict[int, dict[Tid, Remembered]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def remember(self, heap: int, tid: Tid, xmin: str, reason: str, now: float) -> bool:
        """Remember the row at ``tid`` of ``heap`` in version ``xmin`` as undeletable for
        REMEMBER_SECONDS from ``now``; False when the heap already holds MAX_ROWS_PER_HEAP."""
        with self._lock:
            rows = self.heaps.setdefault(heap, {})
            if tid not in rows and len(rows) >= MAX_ROWS_PER_HEAP:
                return False
            rows[tid] = Remembered(xmin, reason, now + REMEMBER_SECONDS)
            return True

    def recall(self, heap: int, now: float) -> dict[Tid, Remembered]:
        """The rows of ``heap`` still remembered at ``now`` (the expired ones forgotten)."""
        with self._lock:
            rows = self.heaps.get(heap, {})
            for tid in [t for t, r in rows.items() if r.until <= now]:
                del rows[tid]
            return dict(rows)

    def forget(self, heap: int, tids: set[Tid] | list[Tid]) -> None:
        """Forget the rows at ``tids`` of ``heap`` (gone, or changed)."""
        with self._lock:
            rows = self.heaps.get(heap, {})
            for tid in tids:
                rows.pop(tid, None)

    def still_undeletable(
        self, heap: int, versions: dict[Tid, str], now: float
    ) -> dict[Tid, Remembered]:
        """Of ``heap``'s remembered rows at ``now``, those whose version at their tuple id is
        still the remembered one (``versions``: tuple id -> xmin now, as the heap reads);
        the others are forgotten: gone, or changed, they are tried again."""
        rows = self.recall(heap, now)
        changed = [t for t, r in rows.items() if versions.get(t) != r.xmin]
        self.forget(heap, changed)
        return {t: r for t, r in rows.items() if t not in changed}

"""When a heap's batches stop making progress: the rows a batch removed, against the rows it
named.

A batch's progress is the rows its DELETE removed from the heap (what the statement returns
of its deleted rows), not the rows it selected: a BEFORE DELETE trigger that returns NULL
keeps a row (and may update it instead: a soft delete), a row-level security policy may let
the role read a row its DELETE cannot reach. Such rows match the predicate still, so the
index path would select them again in every batch, forever, and a heap walk would report a
success that removed nothing. :class:`StallGuard` says when to stop: a batch that named rows
and removed none, or batches that again and again removed far fewer than they named
(docs/engine.md, "A run ends").

Pure: plain numbers in, a verdict out.
"""

from __future__ import annotations

from dataclasses import dataclass

# A batch that removed fewer than this fraction of the rows it named is short. A concurrent
# writer that refreshes a victim between its selection and its delete (the predicate's
# re-check keeps it) takes a row or two out of a batch, not half of it.
SHORT_FRACTION = 0.5
# Short batches in a row that stop a run whatever the catalog says.
MAX_SHORT_BATCHES = 3
# Batches in a row that removed none of the rows they named that stop a run when the
# catalog names no cause (one that names a cause stops it at the first): a single row
# refreshed meanwhile can make one batch of one row remove nothing, not two in a row.
MAX_EMPTY_BATCHES = 2


@dataclass
class StallGuard:
    """Counts the short batches of one heap in a row.

    Attributes:
        short: batches in a row that removed fewer than SHORT_FRACTION of what they named.
        empty: batches in a row that named rows and removed none.
    """

    short: int = 0
    empty: int = 0

    def observe(self, selected: int, deleted: int) -> bool:
        """A batch named ``selected`` rows and removed ``deleted``: True when it is short
        (the caller then asks :meth:`stalled`)."""
        if selected <= 0 or deleted >= selected * SHORT_FRACTION:
            self.short = self.empty = 0
            return False
        self.short += 1
        self.empty = self.empty + 1 if deleted <= 0 else 0
        return True

    def stalled(self, cause_known: bool) -> bool:
        """Whether the run stops after the short batch just observed: at once when it
        removed nothing and the catalog names a cause (``cause_known``), at the
        MAX_EMPTY_BATCHES-th such batch in a row otherwise, and at the MAX_SHORT_BATCHES-th
        short batch in a row whatever it removed."""
        if self.empty and (cause_known or self.empty >= MAX_EMPTY_BATCHES):
            return True
        return self.short >= MAX_SHORT_BATCHES

"""How many rows the next batch may delete: the policy, apart from the database.

A batch's cost is not proportional to the rows it selects: a cascade, a trigger, a wide or
TOASTed row make one delete cost as much as thousands of plain ones. So the row limit of a
batch adapts to what deletes really cost, the way TCP adapts its window (AIMD-like):

- a batch that ran past ``statement_timeout`` halves the limit (multiplicative decrease), so
  that it is retried smaller until it fits;
- a batch that finished fast (in less than a quarter of ``statement_timeout``) lets the limit
  grow again, doubling at most and by at most an eighth of the ceiling per batch, never past
  the configured ``batch_size``;
- a batch that failed for another reason (a row a writer holds, a foreign key, a trigger
  that raises) is split in two halves, each tried on its own; a half that fails is split
  again, down to a batch of one row, which isolates the row that fails (:class:`Splitter`).
  A half that succeeds is never tried again, so k rows that fail among a batch's n cost at
  most about k * log2(n) failed statements. The limit of the batches after it is unchanged.

Pure: no clock, no database; tested with plain numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# A batch this much faster than statement_timeout may grow (a quarter: a batch twice as
# large still has twice the margin it needs).
GROW_BELOW_TIMEOUT_FRACTION = 0.25
# Growth per fast batch is at most this fraction of the ceiling (after doubling): from one
# row back to 10,000 takes about 15 fast batches.
GROWTH_STEP_FRACTION = 1 / 8


@dataclass
class BatchSizer:
    """The row limit of the next batch, in ``[1, ceiling]``.

    Attributes:
        ceiling: the configured batch size (rows); the limit never exceeds it.
        timeout_seconds: the session's statement_timeout (seconds; 0 means none).
        size: the limit now (rows); starts at ``ceiling``.
    """

    ceiling: int
    timeout_seconds: float = 0.0
    size: int = 0

    def __post_init__(self) -> None:
        self.ceiling = max(1, self.ceiling)
        if self.size <= 0 or self.size > self.ceiling:
            self.size = self.ceiling

    def timed_out(self) -> int:
        """A batch of ``size`` rows ran past statement_timeout: halve (at least 1 row)."""
        self.size = max(1, self.size // 2)
        return self.size

    def succeeded(self, seconds: float) -> int:
        """A batch took ``seconds``: grow when it was fast against statement_timeout."""
        fast = (
            self.timeout_seconds <= 0
            or seconds < self.timeout_seconds * GROW_BELOW_TIMEOUT_FRACTION
        )
        if fast and self.size < self.ceiling:
            step = max(1, int(self.ceiling * GROWTH_STEP_FRACTION))
            self.size = min(self.ceiling, self.size * 2, self.size + step)
        return self.size


@dataclass
class Splitter:
    """The limits of the parts of one failing batch still to try: a failing part of n rows
    is replaced by its two halves, the first tried first; a part that succeeds is done. So a
    failing batch is never repeated unchanged, a part that succeeded is never retried, and
    at one row the failing row is alone.

    The parts are counts of victims in the strategy's order (tuple ids from where the walk
    stands, or the index's order): the next part is the next that many victims.

    Attributes:
        parts: the limits of the parts still to try, the next one last (empty: no batch is
            failing).
    """

    parts: list[int] = field(default_factory=list)

    @property
    def limit(self) -> int | None:
        """The limit of the next part (rows), or None when no batch is failing."""
        return self.parts[-1] if self.parts else None

    def next_limit(self, size: int) -> int:
        """The limit of the next attempt: the sizer's ``size``, or less while splitting."""
        return size if not self.parts else min(size, self.parts[-1])

    def failed(self, limit: int) -> int:
        """An attempt of ``limit`` rows (the first ``limit`` of the next part, or a batch)
        failed: it is replaced by its halves. Returns the next attempt's limit (at least 1)."""
        self._take(limit)
        if limit > 1:
            self.parts += [limit - limit // 2, limit // 2]
        else:
            self.parts.append(1)
        return self.parts[-1]

    def succeeded(self, limit: int | None = None, selected: int | None = None) -> None:
        """An attempt of ``limit`` rows succeeded (or its one row was isolated): that many
        rows of the next part are done. An attempt that found fewer victims than its limit
        (``selected``) found the last of them: nothing is left to split. With no ``limit``,
        the split is over."""
        if limit is None or (selected is not None and selected < limit):
            self.parts.clear()
            return
        self._take(limit)

    def _take(self, limit: int) -> None:
        if not self.parts:
            return
        rest = self.parts.pop() - limit
        if rest > 0:
            self.parts.append(rest)

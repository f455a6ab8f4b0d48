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
  that raises) is split: retried at half its limit, down to a batch of one row, which isolates
  the row that fails (:class:`Splitter`). The limit of the batches after it is unchanged.

Pure: no clock, no database; tested with plain numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """The limit of the retries of one failing batch: half the failed limit each time, so a
    failing batch is never repeated unchanged; at one row the failing row is alone.

    Attributes:
        limit: the limit of the next attempt (rows), or None when no batch is failing.
    """

    limit: int | None = None

    def next_limit(self, size: int) -> int:
        """The limit of the next attempt: the sizer's ``size``, or less while splitting."""
        return size if self.limit is None else min(size, self.limit)

    def failed(self, limit: int) -> int:
        """An attempt of ``limit`` rows failed: the next attempt's limit (half, at least 1)."""
        self.limit = max(1, limit // 2)
        return self.limit

    def succeeded(self) -> None:
        """An attempt succeeded: the batches after it take the sizer's limit again."""
        self.limit = None

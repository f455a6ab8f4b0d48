"""The WAL brake: a token bucket of WAL bytes that the runs on one database share, so that
the server's WAL grows by at most ``--max-wal-rate`` bytes a second while a sweep runs.

Pure: :class:`WalBrake` is fed WAL positions and clock readings
(:class:`reaper.engine.pacing.Pacer` measures and waits).
"""

from __future__ import annotations

import threading

# The WAL brake lets a run write this many seconds' worth of --max-wal-rate at once (a token
# bucket), and carries at most MAX_WAL_DEBT_SECONDS' worth of WAL written beyond the limit
# (by any session: a bulk load elsewhere holds the sweep back at most that long).
WAL_BURST_SECONDS = 1.0
MAX_WAL_DEBT_SECONDS = 60.0
# The brake's WAL per batch is measured between two samples; batches that wrote less than this
# between them (batches of empty heap ranges: a few hundred bytes of the server's other work)
# say nothing of what a batch that deletes writes, and are not taken as its measure.
MIN_WAL_PER_BATCH_BYTES = 8192


class WalBrake:
    """A token bucket of WAL bytes: the server's WAL (every session's, as
    ``pg_current_wal_lsn()`` moves) may grow by ``rate`` bytes a second, with a burst of
    :data:`WAL_BURST_SECONDS` of it; :meth:`owed` says how long to wait before the next batch
    so that it does not grow faster. Pure: fed WAL positions and clock readings. One bucket
    serves every run on a database (:meth:`Memory.brake`): a run that starts after another
    inherits its debt, not a fresh burst, and runs at once share the limit. Thread-safe.

    Args:
        rate: bytes per second (``--max-wal-rate``).
        now: the clock's reading at the start (seconds).
    """

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.burst = rate * WAL_BURST_SECONDS
        self.tokens = self.burst
        self._at = now
        self._lsn: int | None = None
        # The most the server's WAL grew by per batch between two positions (None: unknown
        # yet): what the next batches may write, as the brake counts them.
        self.per_batch: float | None = None
        self._lock = threading.Lock()

    def _refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + self.rate * max(now - self._at, 0.0))
        self._at = now

    def written(self, lsn: int, now: float, batches: int = 0) -> None:
        """The server's WAL position was ``lsn`` (bytes) at ``now``, after ``batches``
        batches since the position before (the last one any run reported). A position behind
        the last one is taken as the new start without a debit: another server behind the
        address (a failover), or one run's reading that another's overtook (its bytes may
        then be counted twice: the brake errs on the side of waiting)."""
        with self._lock:
            self._refill(now)
            if self._lsn is not None and lsn >= self._lsn:
                self.tokens = max(
                    self.tokens - (lsn - self._lsn), -self.rate * MAX_WAL_DEBT_SECONDS
                )
                each = (lsn - self._lsn) / batches if batches > 0 else 0.0
                if each >= MIN_WAL_PER_BATCH_BYTES:
                    self.per_batch = max(self.per_batch or 0.0, each)
            self._lsn = lsn

    def covers(self, batches: int, now: float) -> bool:
        """Whether the bucket holds the WAL of ``batches`` more batches at the most WAL per
        batch measured (False while it is unknown: until batches that wrote at least
        :data:`MIN_WAL_PER_BATCH_BYTES` each were measured): else the position is read again
        before the next batch, so that a fast sweep cannot run through its credit between
        two samples, even after batches that deleted nothing."""
        with self._lock:
            if self.per_batch is None:
                return False
            self._refill(now)
            return self.per_batch * batches <= self.tokens

    def owed(self, now: float) -> float:
        """Seconds to wait at ``now`` before the WAL written is back within the limit."""
        with self._lock:
            self._refill(now)
            return max(-self.tokens / self.rate, 0.0)

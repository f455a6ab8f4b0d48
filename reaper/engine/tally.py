"""What a run counts as it goes: each batch, each retry, each row skipped.

One :class:`Tally` per run writes its :class:`SweepResult`, its metrics and its debug lines;
each counter has a method of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import structlog

from reaper import errors
from reaper.db import BatchRows
from reaper.engine.archive import capped_keys
from reaper.engine.durable import DurableCount
from reaper.engine.failures import skip_reason
from reaper.engine.result import SweepResult
from reaper.metrics import Metrics
from reaper.sqltext.names import TableName
from reaper.vocab import SkipReason

log = structlog.get_logger("reaper.runner")


class Tally:
    """The counters of one run, written into its result.

    Args:
        result: the run's result, filled in as it goes.
        metrics: counters to update per batch (None: none, as for a dry run).
        on_batch: called after every batch with the result so far (progress bars).
        durable: counts the rows in ``metrics`` once durable (None: no metrics).

    Thread-safe: a parallel heap walk's helpers count into it.
    """

    def __init__(
        self,
        result: SweepResult,
        *,
        metrics: Metrics | None = None,
        on_batch: Callable[[SweepResult], None] | None = None,
        durable: DurableCount | None = None,
    ) -> None:
        self.result, self.metrics, self.on_batch = result, metrics, on_batch
        self.durable = durable
        self._lock = threading.RLock()

    @property
    def rows(self) -> int:
        """Rows deleted so far."""
        return self.result.rows

    @property
    def last_seconds(self) -> float | None:
        """How long the last batch took (None: no batch yet)."""
        r = self.result
        return r.batch_seconds[-1] if r.batches else None

    def batch(self, rows: int, seconds: float) -> None:
        """Count one committed batch of ``rows`` deleted in ``seconds``."""
        with self._lock:
            r = self.result
            r.rows += rows
            r.batches += 1
            r.batch_seconds.append(seconds)
            if self.metrics is not None:
                self.metrics.batch_finished(r.sweep, seconds)
            if self.durable is not None:
                self.durable.committed(rows)
            log.debug("batch_deleted", sweep=r.sweep, rows=rows, seconds=round(seconds, 4))
            if self.on_batch is not None:
                self.on_batch(r)

    def timed_out(self) -> None:
        """Count a batch that ran past statement_timeout."""
        with self._lock:
            self.result.timed_out_batches += 1

    def contended(self) -> None:
        """Count a batch that met a row a writer held."""
        with self._lock:
            self.result.contended_batches += 1

    def known_undeletable(self, rows: int) -> None:
        """Count ``rows`` left out untried, known undeletable from earlier runs."""
        with self._lock:
            self.result.known_undeletable += rows

    def skipped(self, heap: str, tid: tuple[int, int], exc: errors.DatabaseError) -> None:
        """A row whose delete failed alone: logged once (with the SQLSTATE) and counted."""
        r = self.result
        reason = skip_reason(exc)
        with self._lock:
            r.skipped[reason] = r.skipped.get(reason, 0) + 1
        if self.metrics is not None:
            self.metrics.row_skipped(r.table, reason)
        # A held row is expected (writers are busy) and tried again next run: info, not warning.
        (log.info if reason == SkipReason.LOCKED else log.warning)(
            "row_skipped",
            sweep=r.sweep,
            table=r.table,
            heap=heap,
            tid=f"({tid[0]},{tid[1]})",
            reason=reason,
            sqlstate=exc.sqlstate,
            error=str(exc),
        )

    def deleted_keys(self, heap: TableName, key: Sequence[str], rows: BatchRows) -> None:
        """One ``batch_keys`` debug line with the keys of a committed batch's rows.

        None when the batch returned no keys (it deleted nothing, or keys were not asked
        for); capped at MAX_KEYS_CHARS of keys (``keys_omitted`` counts the rest). ``key``:
        the columns whose values a key holds."""
        if not rows.keys:
            return
        r = self.result
        shown, omitted = capped_keys(rows.keys)
        extra = {"heap": heap} if heap != r.table else {}
        log.debug(
            "batch_keys",
            sweep=r.sweep,
            table=r.table,
            **extra,
            key=key[0] if len(key) == 1 else list(key),
            keys=shown,
            keys_omitted=omitted,
        )

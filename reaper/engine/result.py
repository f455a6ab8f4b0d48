"""What one sweep run did (:class:`SweepResult`) and when it stops with work left
(:class:`Budget`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from reaper.db import LockHolder
from reaper.vocab import FAILED_OUTCOMES, Outcome, Projection, SkipReason, StopReason, Strategy


@dataclass
class SweepResult:
    """What one sweep run did.

    Attributes:
        rows: rows deleted (with ``dry_run``: rows eligible, none deleted).
        batches: batch transactions committed.
        seconds: wall time of the run.
        outcome: ``success``, ``failure``, ``skipped`` or ``refused``.
        strategies: the strategy of each heap, in the order first used (empty for a dry run
            or a failure before the choice); :attr:`strategy` joins them.
        stopped_by: why the loop ended: ``done``, ``max_rows``, ``max_seconds``, ``stop``,
            ``replica_lag`` or ``window_closed``.
        cutoffs: parameter name -> cutoff timestamp used.
        error: the failure's one-line message (no password).
        error_type: the failure's exception class name (e.g. ``ConnectionFailed``).
        sqlstate: the failure's SQLSTATE when the database raised it (e.g. ``57014``).
        batch_seconds: duration of each batch transaction, in order.
        contended_batches: batches that met a row a writer held and were split.
        timed_out_batches: batches that ran past statement_timeout and were retried smaller.
        skipped: rows skipped by reason (``locked``, ``timeout``, ``foreign_key``, ``error``).
        known_undeletable: rows left out untried, unchanged since an earlier run of this
            process found them undeletable (:mod:`reaper.engine.undeletable`).
        lock_holders: for a skipped run, the pids of the sessions that held its locks.
        holders: for a skipped run, who held its locks (pid, user, application, client).
        partitions: partitions removed whole before the batches (reaper.engine.partitions), each
            ``{partition, action, rows, rows_source}``; with ``dry_run``, those it would
            remove, each ``{partition, action, estimated_rows}``.
        locked_at, unlocked_at: Unix times between which the run held its advisory locks
            and did its work (None when it never got them).
        refusal: with ``dry_run``, why a real run would stop before its first delete (the
            full-table interlock's or the clock check's one line), else None.
        refusal_summary: with ``refusal`` from the full-table interlock, its figures alone
            (``N of M rows eligible (P%, counted)``), for one short line under the table.
        note: with ``dry_run``, what the count leaves out (rows that the sweeps it runs
            after would make eligible), else None; set by the caller, which knows them.
        estimated_backlog: the eligible rows that the run's block sample projects before
            its first delete (exact for a heap of at most about 300 blocks, which is
            sampled whole), for a progress display; None before that, and for a dry run.
    """

    sweep: str
    table: str
    reason: str
    rows: int = 0
    batches: int = 0
    seconds: float = 0.0
    outcome: Outcome = Outcome.SUCCESS
    strategies: list[Strategy] = field(default_factory=list)
    stopped_by: StopReason | None = None
    cutoffs: dict[str, datetime] = field(default_factory=dict)
    error: str | None = None
    error_type: str | None = None
    sqlstate: str | None = None
    dry_run: bool = False
    batch_seconds: list[float] = field(default_factory=list)
    contended_batches: int = 0
    timed_out_batches: int = 0
    skipped: dict[SkipReason, int] = field(default_factory=dict)
    known_undeletable: int = 0
    lock_holders: list[int] = field(default_factory=list)
    holders: list[LockHolder] = field(default_factory=list)
    locked_at: float | None = None
    unlocked_at: float | None = None
    partitions: list[dict[str, Any]] = field(default_factory=list)
    refusal: str | None = None
    refusal_summary: str | None = None
    note: str | None = None
    estimated_backlog: int | None = None

    @property
    def failed(self) -> bool:
        """The run failed or was refused (run-once exits 1, the daemon backs off)."""
        return self.outcome in FAILED_OUTCOMES

    @property
    def shown_outcome(self) -> Outcome | Projection:
        """The outcome a person reads: a dry run of a sweep that the real run would refuse
        says ``refused``, not the dry run's own ``success``."""
        return Projection.REFUSED if self.dry_run and self.refusal else self.outcome

    @property
    def strategy(self) -> str | None:
        """``heap`` or ``index``, or both joined by ``+`` when the heaps of a partitioned
        table took different ones, in the order first used (None: no strategy chosen)."""
        return "+".join(self.strategies) if self.strategies else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: timestamps as ISO 8601, seconds rounded to milliseconds."""
        return {
            "sweep": self.sweep,
            "table": self.table,
            "reason": self.reason,
            "rows": self.rows,
            "batches": self.batches,
            "seconds": round(self.seconds, 3),
            "outcome": self.shown_outcome,
            "strategy": self.strategy,
            "stopped_by": self.stopped_by,
            "dry_run": self.dry_run,
            "cutoffs": {k: v.isoformat() for k, v in self.cutoffs.items()},
            "error": self.error,
            "error_type": self.error_type,
            "sqlstate": self.sqlstate,
            "lock_holders": [h.as_dict() for h in self.holders],
            "partitions": self.partitions,
            "skipped": dict(self.skipped),
            "known_undeletable": self.known_undeletable,
            **({"refusal": self.refusal, "note": self.note} if self.dry_run else {}),
        }

"""The full-table interlock: a run never deletes (nearly) a whole table without an opt-in.

Before a run's first delete, :func:`judge_table` refuses it when at least
``max_eligible_fraction`` of a table of FULL_TABLE_MIN_ROWS rows or more is eligible
(:func:`refuse_full_table`), or would be gone counting what this process already deleted
from the table in the current window (:func:`refuse_table_window`, over a
:class:`DeletionLedger`). ``max_eligible_fraction`` 1 is the opt-in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from reaper import errors
from reaper.config.engine import FULL_TABLE_MIN_ROWS
from reaper.config.sweeps import Sweep
from reaper.db import SweepStatements
from reaper.engine.port import BatchSession
from reaper.engine.strategy import sample_percent

log = structlog.get_logger("reaper.runner")

# How long the daemon judges a table's deletions together (seconds): a table of N rows at the
# window's start loses at most max_eligible_fraction of N in that window, however many sweeps
# or runs share the work. A run-once invocation is one window (its Sweeper lives that long).
LEDGER_WINDOW_SECONDS = 24 * 3600.0
# A judgement whose sampled figures come within this fraction of the threshold is made again
# on counted rows: a block sample's projection can be 5% off (docs/performance.md).
EXACT_MARGIN = 0.1


@dataclass(frozen=True)
class EligibleMeasure:
    """How much of a sweep's table its predicate matches, from a block sample of each heap.

    Attributes:
        samples: heap (qualified name) -> ``(eligible, sampled, percent)`` of its sample.
        rows: rows of the table, projected from the samples.
        eligible: eligible rows, projected from the samples.
        counted: rows and eligible rows were counted, not projected (:func:`judge_table`).
    """

    samples: dict[str, tuple[int, int, float]]
    rows: float
    eligible: float
    counted: bool = False

    @property
    def fraction(self) -> float:
        """Eligible rows / rows (0 for an empty table)."""
        return self.eligible / self.rows if self.rows else 0.0


def measure_eligible(
    session: BatchSession, stmts: SweepStatements, params: Mapping[str, Any]
) -> EligibleMeasure:
    """Sample about SAMPLE_BLOCKS blocks of each heap the sweep deletes from (all of a heap
    that small; TABLESAMPLE SYSTEM reads only those) and project rows and eligible rows. The
    same samples feed :func:`reaper.engine.strategy.choose_strategy`: one measurement per heap
    per run."""
    samples: dict[str, tuple[int, int, float]] = {}
    rows = eligible = 0.0
    for hs in stmts.heaps:
        blocks = hs.heap.stats.blocks
        if blocks <= 0:
            continue
        percent = sample_percent(blocks)
        got, sampled = session.sample_eligible(stmts, hs, params, percent)
        samples[hs.heap.table] = (got, sampled, percent)
        rows += sampled * 100.0 / percent
        eligible += got * 100.0 / percent
    return EligibleMeasure(samples, rows, eligible)


def refuse_full_table(sweep: Sweep, measure: EligibleMeasure, threshold: float) -> None:
    """The full-table interlock: stop a run before its first delete when at least
    ``threshold`` of a table of FULL_TABLE_MIN_ROWS rows or more is eligible (a predicate
    that matches everything, a retention in the wrong unit). ``threshold`` 1 is the opt-in:
    the run may empty the table.

    Raises:
        FullTableRefused: one line naming the sweep, the fraction and the setting.
    """
    if threshold >= 1.0 or measure.rows < FULL_TABLE_MIN_ROWS:
        return
    if measure.fraction < threshold:
        return
    kind = "counted" if measure.counted else "estimated"
    summary = (
        f"{measure.eligible:,.0f} of {measure.rows:,.0f} rows eligible "
        f"({measure.fraction:.1%}, {kind})"
    )
    raise errors.FullTableRefused(
        f"sweep {sweep.name}: {measure.fraction:.1%} of {sweep.table} "
        f"({'' if measure.counted else 'about '}{measure.eligible:,.0f} of "
        f"{measure.rows:,.0f} rows, {kind}) is eligible, at or "
        f"above max_eligible_fraction {threshold:g}; nothing was deleted. If that is meant, "
        f"set max_eligible_fraction = 1 in [sweeps.{sweep.name}] (or "
        "--max-eligible-fraction / REAPER_MAX_ELIGIBLE_FRACTION) for this run",
        summary=summary,
    )


@dataclass
class TableWindow:
    """One table's window: when it began (monotonic seconds), its rows then (projected from
    the sample, or ``counted``), and the rows deleted from it since by any sweep of this
    process."""

    started: float
    rows: float
    deleted: int = 0
    counted: bool = False


class DeletionLedger:
    """Per table, the rows deleted in the current window of LEDGER_WINDOW_SECONDS, shared by
    every run on one database of one process (:class:`reaper.engine.run.Sweeper` keeps it):
    the full-table interlock judges the table, not one run, so splitting the work over sweeps
    or runs does not get past it.
    """

    def __init__(self, window_seconds: float = LEDGER_WINDOW_SECONDS) -> None:
        self.window_seconds = window_seconds
        self._tables: dict[str, TableWindow] = {}
        self._lock = threading.Lock()

    def window(self, table: str, rows: float) -> TableWindow:
        """``table``'s current window; a new one (its size ``rows``) when there was none or
        the last is older than the window."""
        with self._lock:
            now = time.monotonic()
            entry = self._tables.get(table)
            if entry is None or now - entry.started >= self.window_seconds:
                entry = self._tables[table] = TableWindow(now, rows)
            return entry

    def record(self, table: str, rows: int) -> None:
        """Count ``rows`` deleted from ``table`` in its current window."""
        with self._lock:
            entry = self._tables.get(table)
            if entry is not None:
                entry.deleted += rows


def refuse_table_window(
    sweep: Sweep,
    measure: EligibleMeasure,
    threshold: float,
    window: TableWindow,
    *,
    projected: bool = False,
) -> None:
    """The full-table interlock across runs: once this process deleted rows from the table in
    the window, stop a run before its first delete when the rows it would leave (rows now
    minus rows eligible now) are at most ``1 - threshold`` of the table's rows at the
    window's start (a table of FULL_TABLE_MIN_ROWS rows or more then). Without inserts
    meanwhile that is (deleted in the window + eligible now) / rows at the start >=
    ``threshold``; rows inserted since count as rows kept, so a busy table whose rows come and
    go many times a day is not refused. ``threshold`` 1 is the opt-in. ``projected``: the
    window counts what a dry run's earlier sweeps would delete (the message says so).

    Raises:
        FullTableRefused: one line naming the sweep, the figures and the setting.
    """
    if threshold >= 1.0 or window.rows < FULL_TABLE_MIN_ROWS or not window.deleted:
        return
    if measure.counted and measure.eligible <= 0:
        # Nothing to delete: the run takes nothing from the table, however little is left
        # of it (an emptied table's next runs are not failures). A sampled zero is no proof.
        return
    left = max(0.0, measure.rows - measure.eligible)
    if left / window.rows > 1.0 - threshold:
        return
    deleted = (
        f"{window.deleted:,} rows that the sweeps before it would delete from {sweep.table}"
        if projected
        else f"{window.deleted:,} rows already deleted from {sweep.table} by this process"
    )
    gone = window.rows - left
    kind = "counted" if measure.counted and window.counted else "estimated"
    # "earlier": what the sweeps before it delete (a dry run), or this process deleted.
    summary = (
        f"{measure.eligible:,.0f} + {window.deleted:,} earlier = {gone:,.0f} of "
        f"{window.rows:,.0f} rows ({gone / window.rows:.1%}, {kind})"
    )
    raise errors.FullTableRefused(
        f"sweep {sweep.name}: {deleted}, and {'' if measure.counted else 'about '}"
        f"{measure.eligible:,.0f} of the {measure.rows:,.0f} left are eligible "
        f"({kind}): the run would leave "
        f"{left / window.rows:.1%} of its {window.rows:,.0f} rows, so "
        f"{1 - left / window.rows:.1%} would be gone, at or above "
        f"max_eligible_fraction {threshold:g}; nothing was deleted. If that is meant, set "
        f"max_eligible_fraction = 1 in [sweeps.{sweep.name}] (or --max-eligible-fraction / "
        "REAPER_MAX_ELIGIBLE_FRACTION)",
        summary=summary,
    )


def judge_table(
    session: BatchSession,
    sweep: Sweep,
    stmts: SweepStatements,
    params: Mapping[str, Any],
    measure: EligibleMeasure,
    threshold: float,
    window: TableWindow,
    *,
    projected: bool = False,
    eligible: int | None = None,
) -> None:
    """The full-table interlock, before a run's first delete (:func:`refuse_full_table`, then
    :func:`refuse_table_window`), for a real run and a dry run alike.

    On the sample's projection when it is clearly below the threshold; when it comes within
    :data:`EXACT_MARGIN` of it, on counts: the table's rows now (a full count of each heap)
    and its eligible rows (``eligible`` if already counted, as a dry run has). The window's
    rows at its start are then the larger of the sample's projection then and the rows now
    plus those deleted since, so that a sample that was low lets no run through; a high one
    can only refuse a run that the counts alone would let go on (a run deleting nearly all
    of the table then needs max_eligible_fraction 1 anyway). If counting fails (a
    statement_timeout), the projection judges. ``projected``: a dry run, whose window holds
    what its earlier sweeps would delete, still in the table it counts.

    Raises:
        FullTableRefused: as :func:`refuse_full_table` and :func:`refuse_table_window`.
    """
    if threshold >= 1.0:
        return
    pending = window.deleted if projected else 0
    rows = max(measure.rows - pending, 0.0)
    sampled = EligibleMeasure(measure.samples, rows, min(measure.eligible, rows))
    gone = sampled.fraction
    if window.deleted and window.rows:
        gone = max(gone, 1.0 - max(rows - sampled.eligible, 0.0) / window.rows)
    if gone < threshold - EXACT_MARGIN:
        measure = sampled
    else:
        try:
            now = session.count_rows(stmts)
            if eligible is None:
                eligible = session.count_eligible(stmts, params)
        except errors.ReaperError as exc:
            log.warning(
                "interlock_count_failed",
                sweep=sweep.name,
                table=sweep.table,
                error=str(exc),
                sqlstate=exc.sqlstate,
            )
            measure = sampled
        else:
            rows = float(max(now - pending, 0))
            measure = EligibleMeasure(
                measure.samples, rows, float(min(eligible, rows)), counted=True
            )
            # A dry run deleted nothing: the table now is the table at the window's start, and
            # its count is exact. A real run's count misses what it deleted, and a sample
            # that was high at the start stands (see above).
            start = float(now) if projected else max(window.rows, now + window.deleted)
            window = TableWindow(
                window.started,
                start,
                window.deleted,
                counted=projected or start == now + window.deleted,
            )
    refuse_full_table(sweep, measure, threshold)
    refuse_table_window(sweep, measure, threshold, window, projected=projected)

"""Progress on a terminal. ``run-once``: a bar per sweep (rows deleted of the estimated
backlog, rate, elapsed), a ``sweep_progress`` log line every few seconds otherwise. The
estimate is the run's own (:attr:`SweepResult.estimated_backlog`, from the block sample it
takes before its first delete), read from the first batch on: nothing is counted for it.
``indexes ensure``: a spinner and bar per build.

:func:`reaper.engine.run.run_sweep` calls ``on_batch`` after every batch (and
:func:`reaper.commands.indexes.ensure` its ``on_progress``); this module turns those calls into a
display, so the engine knows nothing about terminals.
"""

from __future__ import annotations

import logging
import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

import structlog

# rich's progress bars are imported where a bar is drawn (stderr a terminal): a run whose
# progress goes to the log, and `indexes ensure` off a terminal, load none of them.
if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from reaper.commands.indexes import IndexAction
    from reaper.engine.result import SweepResult
    from reaper.sqltext.sqlinfo import IndexSpec

log = structlog.get_logger("reaper.progress")

# Off a terminal, one progress line per sweep at most this often (seconds): a long backlog
# sweep stays visible in the logs without a line per batch.
PLAIN_INTERVAL_SECONDS = 5.0


def _sweep_bars() -> Progress:
    """A run's bars on stderr: the sweep, its bar, rows of the estimate, rate, elapsed."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        ProgressColumn,
        Task,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.text import Text

    class RowsColumn(ProgressColumn):
        def render(self, task: Task) -> Text:
            total = f"{int(task.total):,}" if task.total is not None else "?"
            return Text(f"{int(task.completed):,}/{total} rows")

    class RateColumn(ProgressColumn):
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text(f"{speed:,.0f} rows/s" if speed else "- rows/s")

    return Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        RowsColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        redirect_stderr=True,
    )


class SweepProgress:
    """Shows the progress of the sweeps of one run.

    Args:
        live: bars on stderr (a terminal) when True; log lines otherwise.
    """

    def __init__(self, *, live: bool) -> None:
        self.live = live
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._estimate: int | None = None
        self._last_line = 0.0
        self._started = 0.0
        self._handlers: list[tuple[logging.StreamHandler[Any], Any]] = []

    def __enter__(self) -> SweepProgress:
        if self.live:
            stderr = sys.stderr
            self._progress = _sweep_bars()
            self._progress.start()
            # Log lines go through rich's redirected stderr, above the bars, not through them.
            for h in logging.getLogger().handlers:
                if isinstance(h, logging.StreamHandler) and h.stream is stderr:
                    self._handlers.append((h, h.setStream(sys.stderr)))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for h, stream in self._handlers:
            h.setStream(stream)
        if self._progress is not None:
            self._progress.stop()

    def start(self, sweep: str, estimate: int | None = None) -> None:
        """A sweep starts; ``estimate`` is its backlog in rows (None: the run's own, from its
        first batch on)."""
        self._estimate = estimate
        self._started = self._last_line = time.monotonic()
        if self._progress is not None:
            self._task = self._progress.add_task(sweep, total=estimate)

    def batch(self, result: SweepResult) -> None:
        """After each batch (``run_sweep``'s ``on_batch``)."""
        if self._estimate is None:
            self._estimate = result.estimated_backlog
        if self._progress is not None and self._task is not None:
            task = self._progress.tasks[self._task]
            total = task.total if task.total is not None else self._estimate
            if total is not None and result.rows > total:
                total = result.rows  # more garbage than estimated (it kept coming)
            self._progress.update(self._task, completed=result.rows, total=total)
            return
        now = time.monotonic()
        if now - self._last_line >= PLAIN_INTERVAL_SECONDS:
            self._last_line = now
            elapsed = now - self._started
            log.info(
                "sweep_progress",
                sweep=result.sweep,
                rows=result.rows,
                estimated_backlog=self._estimate,
                rows_per_second=round(result.rows / elapsed) if elapsed > 0 else None,
                seconds=round(elapsed, 1),
            )

    def finish(self, result: SweepResult) -> None:
        """A sweep ended (any outcome): its bar is completed at the rows it deleted."""
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=result.rows, total=result.rows)
            self._task = None


class IndexProgress:
    """A spinner and bar per build of ``reaper indexes ensure`` on a terminal, from
    pg_stat_progress_create_index.

    Args:
        live: show them (stderr is a terminal); otherwise nothing is shown.
    """

    def __init__(self, live: bool) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.live = live
        self._progress = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            TextColumn("{task.fields[phase]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            disable=not live,
        )
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> IndexProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def action(self, action: IndexAction) -> None:
        """``ensure``'s ``on_action``: a build (or rebuild) starts its bar."""
        from reaper.commands.indexes import CREATE, REBUILD

        if self.live and action.action in (CREATE, REBUILD):
            self._tasks[action.index] = self._progress.add_task(
                f"{action.action} {action.index}", total=None, phase="starting"
            )

    def update(self, spec: IndexSpec, row: dict[str, Any]) -> None:
        """``ensure``'s ``on_progress``: one reading of the build's progress."""
        task = self._tasks.get(spec.name)
        if task is None or not row:
            return
        # blocks while scanning the table, tuples while sorting and loading the index.
        total, done = row.get("blocks_total") or 0, row.get("blocks_done") or 0
        if not total:
            total, done = row.get("tuples_total") or 0, row.get("tuples_done") or 0
        self._progress.update(
            task, total=total or None, completed=done, phase=row.get("phase") or ""
        )

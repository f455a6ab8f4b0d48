"""Tables for people, at any width: every table reaper prints goes through :func:`print_table`,
and the tables of the commands (``run-once``, ``status``, ``check``, ``indexes ensure``) are
built here from their results.

A table fits the terminal (its width; off a terminal ``COLUMNS``, else 80 columns) by
construction: columns marked optional are left out, last first, until it fits (``--wide``
keeps them all); a table that still does not fit is printed stacked, one block per row with
one ``header: value`` line per column, wrapped. A cell is never cut: a sweep name is whole
or not shown at all.

Everything printed is inert (:func:`reaper.log.inert`): a name from the database that holds
ESC, CR, BEL or a bidirectional override is shown as its escapes, in a cell, a stacked block
or a line under a table, because the console itself (:func:`make_console`) and the tables
(:func:`_table`) escape whatever they are given.
"""

from __future__ import annotations

import io
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Span, Text

from reaper.config.values import format_duration
from reaper.log import inert
from reaper.vocab import (
    CheckStatus,
    IndexOutcome,
    Outcome,
    PartitionAction,
    Projection,
    SpaceVerdict,
)

if TYPE_CHECKING:
    from reaper.commands.checks import Finding
    from reaper.commands.indexes import IndexAction
    from reaper.commands.status import SweepStatus
    from reaper.config.sweeps import Sweep
    from reaper.db import Cascade
    from reaper.engine.result import SweepResult

DEFAULT_WIDTH_COLUMNS = 80
# Wide enough for any table unwrapped.
_UNBOUNDED_COLUMNS = 100_000


@dataclass(frozen=True)
class Column:
    """One column of a table.

    Attributes:
        header: its heading.
        right: right-justified (numbers).
        optional: left out when the table does not fit, last optional column first, unless
            ``--wide``.
    """

    header: str
    right: bool = False
    optional: bool = False


Cell = str | Text  # a str is printed as it is (never markup); a Text carries its colour


def inert_cell(cell: Cell) -> Cell:
    """``cell`` with its text :func:`reaper.log.inert`, a Text's colours kept on the same
    characters."""
    if not isinstance(cell, Text):
        return inert(cell)
    plain = cell.plain
    if inert(plain) == plain:
        return cell
    # Where each character of plain starts in the escaped text: the spans move with it.
    parts = [inert(ch) for ch in plain]
    at = [0]
    for part in parts:
        at.append(at[-1] + len(part))
    out = cell.copy()
    out.plain = "".join(parts)
    out.spans = [Span(at[sp.start], at[min(sp.end, len(plain))], sp.style) for sp in cell.spans]
    return out


class InertConsole(Console):
    """A rich console that prints every str and Text it is given :func:`inert_cell`: no
    line reaches the terminal with a control character of the database's or the config's
    (a table's cells are made inert where the table is built, :func:`_table`)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(
            *(inert_cell(o) if isinstance(o, (str, Text)) else o for o in objects), **kwargs
        )


def make_console() -> Console:
    """A console :func:`width` wide, with markup, emoji codes and highlighting off: names and
    messages come from the database and the config and are printed as they are ("[bold]" or
    ":x:" in a table name is text), and inert (:class:`InertConsole`)."""
    return InertConsole(width=width(), markup=False, emoji=False, highlight=False, soft_wrap=False)


def width() -> int:
    """Columns to fit: the terminal's, else ``COLUMNS``, else 80."""
    if sys.stdout.isatty():
        return Console().width
    try:
        return max(int(os.environ.get("COLUMNS", "")), 20)
    except ValueError:
        return DEFAULT_WIDTH_COLUMNS


def _table(title: str, columns: Sequence[Column], rows: Sequence[Sequence[Cell]]) -> Table:
    """The one place a table is built: each cell inert before rich measures it."""
    table = Table(title=inert(title), box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    for c in columns:
        table.add_column(inert(c.header), justify="right" if c.right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(inert_cell(cell) for cell in row))
    return table


def _natural_width(table: Table) -> int:
    """The width of ``table``'s widest line, unwrapped, without the blank right edge of its
    box: what the columns need, the title aside. Measured, not drawn: print_table measures
    each column alone, once (drawing the whole table for each column it tried to leave out
    or give back cost 30 ms of a run-once's table of seven sweeps)."""
    console = Console(
        file=io.StringIO(),
        width=_UNBOUNDED_COLUMNS,
        color_system=None,
        markup=False,
        emoji=False,
        highlight=False,
    )
    # SIMPLE_HEAD's right edge is a space, which a printed line ends with; not counted.
    return Measurement.get(console, console.options, table).maximum - 1


def _joined_width(alone: Sequence[int], keep: Sequence[int]) -> int:
    """The natural width of a table of the columns ``keep``, from each column's alone
    (``alone[i]``: :func:`_natural_width` of a table of column ``i`` only): between each two
    columns, two columns of padding (the third, the separator, is the right edge a column
    alone counts)."""
    return sum(alone[i] for i in keep) + 2 * (len(keep) - 1)


def print_table(
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[Cell]],
    *,
    wide: bool = False,
    console: Console | None = None,
) -> list[str]:
    """Print ``rows`` under ``columns`` within :func:`width` (``console``: where; default
    :func:`make_console`).

    Returns:
        the headers of the optional columns left out (empty with ``wide``); the caller may
        say how to see them.
    """
    limit = width()
    out = console or make_console()
    keep = list(range(len(columns)))
    dropped: list[str] = []

    def project(idx: Sequence[int]) -> Table:
        return _table(title, [columns[i] for i in idx], [[row[i] for i in idx] for row in rows])

    # Each column measured once, alone: the width of any choice of them follows.
    alone = [_natural_width(project([i])) for i in range(len(columns))]
    if not wide:
        for i in reversed(range(len(columns))):
            if _joined_width(alone, keep) <= limit:
                break
            if columns[i].optional:
                keep.remove(i)
                dropped.insert(0, columns[i].header)
        # Give back, leftmost first, each column left out that fits after all.
        for header in list(dropped):
            i = next(j for j, c in enumerate(columns) if c.header == header)
            if _joined_width(alone, sorted([*keep, i])) <= limit:
                keep = sorted([*keep, i])
                dropped.remove(header)
    if _joined_width(alone, keep) <= limit:
        out.print(project(keep))
        if dropped:
            out.print(Text(f"(--wide adds: {', '.join(dropped)})", style="dim"))
        return dropped
    _print_stacked(
        title, [columns[i] for i in keep], [[r[i] for i in keep] for r in rows], limit, out
    )
    return dropped


def _plain(cell: Cell) -> str:
    return inert(cell.plain if isinstance(cell, Text) else cell)


def _print_stacked(
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[Cell]],
    limit: int,
    console: Console,
) -> None:
    """One block per row: its first cell, then ``header: value`` lines, wrapped."""
    console.print(Text(inert(title), style="italic"))
    label = max(len(c.header) for c in columns[1:]) if len(columns) > 1 else 0
    for row in rows:
        console.print()
        console.print(Text(_plain(row[0]), style="bold"))
        for c, cell in zip(columns[1:], row[1:], strict=True):
            plain = _plain(cell)
            if not plain:
                continue
            indent = " " * (label + 4)
            lines = textwrap.wrap(
                plain,
                width=max(limit - len(indent), 20),
                break_long_words=True,
                break_on_hyphens=False,
            ) or [""]
            head = f"  {c.header + ':':<{label + 1}} "
            console.print(Text(head + lines[0]), highlight=False, soft_wrap=True)
            for line in lines[1:]:
                console.print(Text(indent + line), highlight=False, soft_wrap=True)


# -- the commands' tables ---------------------------------------------------------------------
# Every line under a table goes through make_console() too: names and server messages come
# from the database and the config and are printed as they are; colour goes through Text
# styles.

_CHECK_COLOURS = {CheckStatus.PASS: "green", CheckStatus.WARN: "yellow", CheckStatus.FAIL: "red"}
_INDEX_COLOURS = {
    IndexOutcome.FAILED: "red",
    IndexOutcome.DONE: "green",
    IndexOutcome.DRY_RUN: "yellow",
}
_PARTITION_VERBS = {PartitionAction.DROP: "dropped", PartitionAction.DETACH: "detached"}


def print_results(
    results: Sequence[SweepResult],
    *,
    dry_run: bool,
    wide: bool = False,
    cascaded: Mapping[str, Sequence[Cascade]] | None = None,
) -> None:
    """``reaper run-once``: one row per sweep (sweep, table, reason, rows, batches, seconds,
    outcome), then, for a dry run, what each count leaves out, the rows ``ON DELETE CASCADE``
    would take with them (``cascaded``, by sweep) and the sweeps a real run would refuse;
    then the partitions removed, the errors and the lock holders, one line each."""
    rows: list[list[Cell]] = []
    for r in results:
        colour = "green" if r.outcome == Outcome.SUCCESS else "red"
        if r.shown_outcome == Projection.REFUSED:
            colour = "yellow"
        rows.append(
            [
                r.sweep,
                r.table,
                r.reason,
                f"{r.rows:,}",
                str(r.batches),
                f"{r.seconds:.3f}",
                Text(r.shown_outcome, style=colour),
            ]
        )
    print_table(
        "reaper run-once" + (" (dry run: nothing deleted)" if dry_run else ""),
        [
            Column("sweep"),
            Column("table", optional=True),
            Column("reason", optional=True),
            Column("eligible" if dry_run else "deleted", right=True),
            Column("batches", right=True),
            Column("seconds", right=True),
            Column("outcome"),
        ],
        rows,
        wide=wide,
    )
    console = make_console()
    if dry_run:
        for r in results:
            if r.note:
                console.print(f"note: {r.note}", highlight=False)
        from reaper.commands import cascades

        for r in results:
            for c in (cascaded or {}).get(r.sweep, []) if r.rows else []:
                console.print(
                    Text.assemble(
                        (r.sweep, "yellow"), ": would also delete ", cascades.describe(c, r.rows)
                    )
                )
        # The full-table interlock's refusals: one line of figures per sweep between a line
        # that says what they are and one with the fix (each sweep's full line is in --json's
        # refusal, and in the real run's error).
        interlocked = [r for r in results if r.refusal and r.refusal_summary]
        if interlocked:
            console.print(
                "the full-table interlock would stop these before their first delete:",
                highlight=False,
            )
            for r in interlocked:
                # Wrapped at the terminal's width: a long sweep name or count never runs past.
                console.print(Text.assemble((r.sweep, "yellow"), ": ", r.refusal_summary or ""))
            console.print(
                "(earlier: the rows the sweeps before it delete from the table); to "
                "let one go on: max_eligible_fraction = 1 in its [sweeps.NAME]",
                highlight=False,
            )
        for r in results:
            if r.refusal and not r.refusal_summary:
                console.print(
                    Text.assemble((r.sweep, "yellow"), ": a real run would be refused: ", r.refusal)
                )
    for r in results:
        for p in r.partitions:
            verb = _PARTITION_VERBS.get(p["action"], p["action"])
            if dry_run:
                console.print(
                    f"{r.sweep}: would {p['action'].replace('_', ' ')} partition "
                    f"{p['partition']} (~{p['estimated_rows']:,} rows, estimated)",
                    highlight=False,
                )
            else:
                console.print(
                    f"{r.sweep}: {verb} partition {p['partition']} "
                    f"({p['rows']:,} rows, {p['rows_source']})",
                    highlight=False,
                )
    for r in results:
        if r.error:
            console.print(Text.assemble((r.sweep, "red"), ": ", r.error))
        for h in r.holders:
            # One line however long: who holds the lock is what an operator greps for.
            console.print(
                Text.assemble((r.sweep, "yellow"), ": skipped, lock held by ", h.describe()),
                soft_wrap=True,
            )


def dependants_notes(sweeps: Sequence[Sweep], counts: Mapping[str, int]) -> dict[str, str]:
    """What a count of eligible rows leaves out, in a dry run and in ``status``: a sweep that
    runs after others (its ``after``) is counted against the table as it is now, while a real
    run lets those sweeps delete first, which can make more of its rows eligible (a token
    that only a stale request still references). One line per such sweep whose predecessors
    have rows to delete, by sweep name.

    Args:
        sweeps: the sweeps counted.
        counts: eligible rows by sweep name.
    """
    notes: dict[str, str] = {}
    for s in sweeps:
        first = [name for name in s.after if counts.get(name, 0) > 0]
        if first and s.name in counts:
            rows = sum(counts[name] for name in first)
            # Two sweeps of one table may count the same row: their sum is then a bound.
            bound = "up to " if len(first) > 1 else ""
            notes[s.name] = (
                f"{s.name}: counted as its table is now; a real run first lets "
                f"{' and '.join(first)} delete {bound}{rows:,} rows, which can make more of "
                f"{s.table}'s rows eligible: the count cannot include those"
            )
    return notes


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    # An age of days shown to the second is noise: whole minutes past an hour.
    step = 60 if seconds >= 3600 else 1
    return format_duration(timedelta(seconds=round(seconds / step) * step))


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _when(d: datetime | None) -> str:
    return d.strftime("%Y-%m-%d %H:%M") if d is not None else "never"


def _timing(r: SweepStatus, windows: bool) -> list[Cell]:
    """The next run cell (and, with ``windows``, the window cell) of a status row, times on
    the clock of the sweep's zone."""
    zone = ZoneInfo(r.zone or "UTC")
    run = r.next_run.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z") if r.next_run else r.schedule
    if not windows:
        return [run]
    if r.window is None or r.window_changes is None:
        return [run, "any time"]
    change = r.window_changes.astimezone(zone).strftime("%H:%M")
    state = f"open until {change}" if r.window_open else f"closed until {change}"
    return [run, f"{r.window} {state}"]


def print_status(
    rows: Sequence[SweepStatus], *, wide: bool = False, sweeps: Sequence[Sweep] = ()
) -> None:
    """``reaper status``: one row per sweep (backlog, oldest eligible age, table rows, size,
    dead tuples, vacuum, next run, and its window when a sweep has one), then the lock holders,
    what the backlog counts leave out, and, once per table whose dead rows are not being
    reclaimed, why (a ``space:`` line naming what holds them, and the fix)."""
    cells: list[list[Cell]] = []
    # The window column only when a sweep has a window: most configurations have none.
    windows = any(r.window is not None for r in rows)
    for r in rows:
        if r.error:
            cells.append(
                [r.sweep, r.table, Text(r.error, style="red"), *[""] * 6, *_timing(r, windows)]
            )
            continue
        backlog = f"{'>=' if r.backlog_capped else ''}{r.backlog_rows:,}"
        est = (
            f"{r.estimated_rows:,}"
            if r.estimated_rows is not None and r.estimated_rows >= 0
            else "never analyzed"
        )
        cells.append(
            [
                r.sweep,
                r.table,
                backlog,
                _age(r.oldest_eligible_age_seconds),
                est,
                _bytes(r.total_bytes),
                f"{r.dead_tuples:,}" if r.dead_tuples is not None else "-",
                _when(r.last_vacuum),
                _when(r.last_autovacuum),
                *_timing(r, windows),
            ]
        )
    # A row that failed says why in its backlog cell: every column, so the reason is whole.
    print_table(
        "reaper status",
        [
            Column("sweep"),
            Column("table", optional=True),
            Column("backlog", right=True),
            Column("oldest", right=True),
            Column("est. rows", right=True),
            Column("size", right=True),
            Column("dead rows", right=True),
            Column("last vacuum", optional=True),
            Column("last autovacuum", optional=True),
            Column("schedule"),
            *([Column("window")] if windows else []),
        ],
        cells,
        wide=wide or any(r.error for r in rows),
    )
    console = make_console()
    if rows:
        from reaper.commands.status import SCHEDULE_SOURCE

        # status reads the configuration it is given, never the daemon's.
        console.print(
            f"schedule: from {SCHEDULE_SOURCE} (--interval, --schedule, --window, the config "
            "file); a running `reaper run` keeps the settings it started with (its "
            "daemon_started log line lists each sweep's)"
        )
    for r in rows:
        for h in r.lock_holders:
            console.print(
                Text.assemble((r.sweep, "yellow"), ": lock held by ", h.describe()), soft_wrap=True
            )
    counts = {r.sweep: r.backlog_rows for r in rows if r.backlog_rows is not None}
    for note in dependants_notes(sweeps, counts).values():
        console.print(f"note: {note}")
    # Deleted is not freed: once per table whose dead rows wait, why, and what frees them.
    seen: set[str] = set()
    for r in rows:
        if r.table in seen:
            continue
        seen.add(r.table)
        if r.space_error:
            console.print(
                Text.assemble(
                    (f"{r.table}: ", "yellow"), f"dead rows not examined: {r.space_error}"
                ),
                soft_wrap=True,
            )
        elif r.space is not None and r.now is not None and r.space.verdict != SpaceVerdict.OK:
            fix = r.space.fix()
            console.print(
                Text.assemble(
                    ("space: ", "yellow"),
                    f"{r.table}: {r.space.describe(r.now)}",
                    f". Fix: {fix}" if fix else "",
                ),
                soft_wrap=True,
            )


def print_findings(findings: Sequence[Finding], *, wide: bool = False) -> None:
    """``reaper check``: one row per finding, then (when columns were left out) what each
    finding that did not pass says and its fix, and a count of failures and warnings."""
    rows: list[list[Cell]] = [
        [
            f.sweep,
            f.check,
            Text(f.status, style=_CHECK_COLOURS[f.status]),
            f.subject,
            f.detail,
            f.fix or "",
        ]
        for f in findings
    ]
    dropped = print_table(
        "reaper check",
        [
            Column("sweep"),
            Column("check"),
            Column("status"),
            Column("subject", optional=True),
            Column("detail", optional=True),
            Column("fix", optional=True),
        ],
        rows,
        wide=wide,
    )
    console = make_console()
    if dropped:
        # What a finding that did not pass says, and its fix, under the table.
        for f in findings:
            if f.status != CheckStatus.PASS:
                stop = "" if f.detail.rstrip().endswith((".", ":", ";")) else "."
                text = f"{f.subject}: {f.detail}" + (f"{stop} Fix: {f.fix}" if f.fix else "")
                console.print(
                    Text.assemble(
                        (f.status, _CHECK_COLOURS[f.status]), f" {f.sweep} {f.check}: {text}"
                    )
                )
    failed = sum(f.status == CheckStatus.FAIL for f in findings)
    console.print(
        Text.assemble(
            f"{len(findings)} checks, ",
            (f"{failed} failed", "red"),
            f", {sum(f.status == CheckStatus.WARN for f in findings)} warnings",
        )
    )


def print_index_actions(
    actions: Sequence[IndexAction], *, dry_run: bool, wide: bool = False
) -> None:
    """``reaper indexes ensure``: one row per index (action, outcome, seconds, detail); with
    ``dry_run``, the statements a real run would execute."""
    title = "reaper indexes ensure" + (" (dry run: nothing built)" if dry_run else "")
    rows: list[list[Cell]] = []
    for a in actions:
        outcome = Text(a.outcome, style=_INDEX_COLOURS.get(a.outcome, ""))
        rows.append([a.index, a.table, a.action, outcome, f"{a.seconds:.3f}", a.error or a.detail])
    print_table(
        title,
        [
            Column("index"),
            Column("table", optional=True),
            Column("action"),
            Column("outcome"),
            Column("seconds", right=True, optional=True),
            Column("detail", optional=True),
        ],
        rows,
        wide=wide or any(a.outcome == IndexOutcome.FAILED for a in actions),
    )
    console = make_console()
    if dry_run:
        for a in actions:
            for stmt in a.statements:
                console.print(f"{stmt};")

"""Tables for people, at any width: every table reaper prints goes through :func:`print_table`.

A table fits the terminal (its width; off a terminal ``COLUMNS``, else 80 columns) by
construction: columns marked optional are left out, last first, until it fits (``--wide``
keeps them all); a table that still does not fit is printed stacked, one block per row with
one ``header: value`` line per column, wrapped. A cell is never cut: a sweep name is whole
or not shown at all.
"""

from __future__ import annotations

import io
import os
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

DEFAULT_WIDTH_COLUMNS = 80


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


def width() -> int:
    """Columns to fit: the terminal's, else ``COLUMNS``, else 80."""
    if sys.stdout.isatty():
        return Console().width
    try:
        return max(int(os.environ.get("COLUMNS", "")), 20)
    except ValueError:
        return DEFAULT_WIDTH_COLUMNS


def _table(title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    for c in columns:
        table.add_column(c.header, justify="right" if c.right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def _natural_width(table: Table) -> int:
    console = Console(file=io.StringIO(), width=100_000, color_system=None)
    console.print(table)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    # The title is centred across the console; only the columns count.
    return max((len(line.rstrip()) for line in text.splitlines()[1:]), default=0)


def print_table(
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    wide: bool = False,
    console: Console | None = None,
) -> list[str]:
    """Print ``rows`` (cells as rich markup) under ``columns`` within :func:`width`.

    Returns:
        the headers of the optional columns left out (empty with ``wide``); the caller may
        say how to see them.
    """
    limit = width()
    console = console or Console(width=limit, soft_wrap=False)
    keep = list(range(len(columns)))
    dropped: list[str] = []

    def project(idx: Sequence[int]) -> Table:
        return _table(title, [columns[i] for i in idx], [[row[i] for i in idx] for row in rows])

    table = project(keep)
    if not wide:
        for i in reversed(range(len(columns))):
            if _natural_width(table) <= limit:
                break
            if columns[i].optional:
                keep.remove(i)
                dropped.insert(0, columns[i].header)
                table = project(keep)
        # Give back, leftmost first, each column left out that fits after all.
        for header in list(dropped):
            i = next(j for j, c in enumerate(columns) if c.header == header)
            trial = project(sorted([*keep, i]))
            if _natural_width(trial) <= limit:
                keep = sorted([*keep, i])
                dropped.remove(header)
                table = trial
    if _natural_width(table) <= limit:
        console.print(table)
        if dropped:
            console.print(
                f"[dim](--wide adds: {', '.join(dropped)})[/dim]", highlight=False
            )
        return dropped
    _print_stacked(title, [columns[i] for i in keep], [[r[i] for i in keep] for r in rows],
                   limit, console)
    return dropped


def _print_stacked(
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    limit: int,
    console: Console,
) -> None:
    """One block per row: its first cell, then ``header: value`` lines, wrapped."""
    console.print(Text(title, style="italic"))
    label = max(len(c.header) for c in columns[1:]) if len(columns) > 1 else 0
    for row in rows:
        console.print()
        console.print(Text.from_markup(row[0], style="bold"))
        for c, cell in zip(columns[1:], row[1:], strict=True):
            plain = Text.from_markup(cell).plain
            if not plain:
                continue
            indent = " " * (label + 4)
            lines = textwrap.wrap(
                plain, width=max(limit - len(indent), 20), break_long_words=True,
                break_on_hyphens=False,
            ) or [""]
            head = f"  {c.header + ':':<{label + 1}} "
            console.print(Text(head + lines[0]), highlight=False, soft_wrap=True)
            for line in lines[1:]:
                console.print(Text(indent + line), highlight=False, soft_wrap=True)

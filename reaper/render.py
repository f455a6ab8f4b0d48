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


Cell = str | Text  # a str is printed as it is (never markup); a Text carries its colour


def make_console() -> Console:
    """A console :func:`width` wide, with markup, emoji codes and highlighting off: names and
    messages come from the database and the config and are printed as they are ("[bold]" or
    ":x:" in a table name is text)."""
    return Console(width=width(), markup=False, emoji=False, highlight=False, soft_wrap=False)


def width() -> int:
    """Columns to fit: the terminal's, else ``COLUMNS``, else 80."""
    if sys.stdout.isatty():
        return Console().width
    try:
        return max(int(os.environ.get("COLUMNS", "")), 20)
    except ValueError:
        return DEFAULT_WIDTH_COLUMNS


def _table(title: str, columns: Sequence[Column], rows: Sequence[Sequence[Cell]]) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    for c in columns:
        table.add_column(c.header, justify="right" if c.right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def _natural_width(table: Table) -> int:
    out = io.StringIO()
    Console(file=out, width=100_000, color_system=None, markup=False, emoji=False,
            highlight=False).print(table)
    text = out.getvalue()
    # The title is centred across the console; only the columns count.
    return max((len(line.rstrip()) for line in text.splitlines()[1:]), default=0)


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
        out.print(table)
        if dropped:
            out.print(Text(f"(--wide adds: {', '.join(dropped)})", style="dim"))
        return dropped
    _print_stacked(title, [columns[i] for i in keep], [[r[i] for i in keep] for r in rows],
                   limit, out)
    return dropped


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _print_stacked(
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[Cell]],
    limit: int,
    console: Console,
) -> None:
    """One block per row: its first cell, then ``header: value`` lines, wrapped."""
    console.print(Text(title, style="italic"))
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
                plain, width=max(limit - len(indent), 20), break_long_words=True,
                break_on_hyphens=False,
            ) or [""]
            head = f"  {c.header + ':':<{label + 1}} "
            console.print(Text(head + lines[0]), highlight=False, soft_wrap=True)
            for line in lines[1:]:
                console.print(Text(indent + line), highlight=False, soft_wrap=True)

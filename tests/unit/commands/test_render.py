"""Every table reaper prints is readable at 80 columns: no line wider than the terminal, no
cell cut; columns left out to fit are named (``--wide`` shows them, stacked if need be)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from rich.text import Text

from reaper.commands import render
from tests.support import (
    BUILTIN_SWEEPS,
)

SWEEPS = [s.name for s in BUILTIN_SWEEPS]


def rendered(monkeypatch, width: int, *, wide: bool = False, long: str = "x") -> tuple[str, list]:
    monkeypatch.setenv("COLUMNS", str(width))
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None)
    columns = [
        render.Column("sweep"),
        render.Column("table", optional=True),
        render.Column("rows", right=True),
        render.Column("detail", optional=True),
        render.Column("fix", optional=True),
    ]
    rows = [
        [
            name,
            f"public.{name}_table",
            f"{i * 12345:,}",
            f"{long} detail of {name}",
            f"GRANT DELETE ON {name} TO reaper",
        ]
        for i, name in enumerate(SWEEPS)
    ]
    dropped = render.print_table("t", columns, rows, wide=wide, console=console)
    return out.getvalue(), dropped


@pytest.mark.parametrize("width", [40, 60, 80, 100, 200])
@pytest.mark.parametrize("long", ["short", "a long sentence that explains " * 4])
def test_no_line_is_wider_than_the_terminal_and_no_name_is_cut(monkeypatch, width, long) -> None:
    text, _ = rendered(monkeypatch, width, long=long)
    assert max(len(line) for line in text.splitlines()) <= width
    for name in SWEEPS:
        assert re.search(rf"(?m)^\s*{name}\b", text), name  # whole, at the start of its row
    assert "…" not in text


def test_a_table_that_fits_keeps_every_column(monkeypatch) -> None:
    text, dropped = rendered(monkeypatch, 200)
    assert dropped == [] and "GRANT DELETE ON router_leases TO reaper" in text


def test_columns_left_out_are_named_and_wide_shows_them(monkeypatch) -> None:
    text, dropped = rendered(monkeypatch, 80, long="a long sentence " * 5)
    assert dropped and "--wide adds: " + ", ".join(dropped) in " ".join(text.split())
    wide, none = rendered(monkeypatch, 80, wide=True, long="a long sentence " * 5)
    assert none == []
    assert max(len(line) for line in wide.splitlines()) <= 80
    flat = " ".join(wide.split())
    for name in SWEEPS:
        assert f"GRANT DELETE ON {name} TO reaper" in flat


# The real commands, on the demo's rows, at 80 columns.


def _drawn_width(table) -> int:
    """The widest line of ``table`` drawn unwrapped, its title and blank right edge aside."""
    out = io.StringIO()
    Console(
        file=out, width=100_000, color_system=None, markup=False, emoji=False, highlight=False
    ).print(table)
    return max((len(line.rstrip()) for line in out.getvalue().splitlines()[1:]), default=0)


@pytest.mark.parametrize(
    "long",
    [
        "",
        "x",
        "short",
        "a long sentence that explains " * 4,
        "wide \u6f22\u5b57 cells",
        "two\nlines",
    ],
)
@pytest.mark.parametrize("keep", [(0,), (0, 2), (0, 1, 2), (0, 2, 4), (1, 3), (0, 1, 2, 3, 4)])
def test_a_tables_measured_width_is_its_drawn_width(long: str, keep: tuple[int, ...]) -> None:
    # print_table measures each column alone to choose its columns: the width it adds up is
    # the width of the table it draws.
    columns = [
        render.Column("sweep"),
        render.Column("table", optional=True),
        render.Column("rows", right=True),
        render.Column("detail", optional=True),
        render.Column("outcome"),
    ]
    rows = [
        [
            name,
            f"public.{name}",
            f"{i * 12345:,}",
            f"{long} {name}"[: 7 * i],
            Text("success" if i % 2 else long, style="green"),
        ]
        for i, name in enumerate(SWEEPS)
    ]

    def table(idx: tuple[int, ...]):
        return render._table(
            "reaper run-once", [columns[i] for i in idx], [[r[i] for i in idx] for r in rows]
        )

    alone = [render._natural_width(table((i,))) for i in range(len(columns))]
    assert render._natural_width(table(keep)) == _drawn_width(table(keep))
    assert render._joined_width(alone, keep) == _drawn_width(table(keep))


# -- names from the database are printed inert ------------------------------------------------

# What a hostile name may hold: ESC (a colour, a cleared screen, a window title), CR (a line
# drawn over), BEL, a bidirectional override (text shown reversed), a newline (a line faked).
HOSTILE = "idx\x1b[2J\x1b]0;title\x07\rover\u202eesrever\u2066x\u2069\nfake"
# Each of them as a terminal must never receive it.
ACTIVE = ("\x1b", "\r", "\x07", "\u202e", "\u2066", "\u2069")


def _inert(text: str) -> None:
    assert not any(ch in text for ch in ACTIVE), repr(text)


@pytest.mark.parametrize("width", [40, 200], ids=["stacked", "table"])
@pytest.mark.parametrize("as_text", [False, True], ids=["str", "Text"])
def test_a_cell_is_printed_inert_in_a_table_and_stacked(
    monkeypatch: pytest.MonkeyPatch, width: int, as_text: bool
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    out = io.StringIO()
    cell = Text.assemble(("red ", "red"), HOSTILE) if as_text else HOSTILE
    render.print_table(
        "t",
        [render.Column("sweep"), render.Column("index"), render.Column("detail")],
        [["nodes_silent", cell, "a detail long enough to stack the table at 40 columns"]],
        wide=True,
        console=Console(file=out, width=width, color_system="truecolor", force_terminal=True),
    )
    # rich's own colours are escape sequences: the cell's text between them is inert.
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    _inert(text)
    shown = "".join(text.split())  # a stacked cell is wrapped
    # Its newline shown as \n, never a line of its own. (A Text is made without CR and BEL.)
    bell = "" if as_text else "\\x07\\r"
    assert f"idx\\x1b[2J\\x1b]0;title{bell}over\\u202eesrever\\u2066x\\u2069\\nfake" in shown


def test_a_text_keeps_its_colours_on_the_same_characters() -> None:
    cell = render.inert_cell(Text.assemble(("a\x1bb", "red"), ("c", "blue")))
    assert isinstance(cell, Text)
    assert cell.plain == "a\\x1bbc"
    assert [(s.start, s.end, str(s.style)) for s in cell.spans] == [(0, 6, "red"), (6, 7, "blue")]


def test_lines_under_a_table_are_inert(capsys: pytest.CaptureFixture[str]) -> None:
    from reaper.commands.checks import Finding
    from reaper.vocab import CheckName, CheckStatus

    finding = Finding("nodes_silent", CheckName.INDEX, CheckStatus.FAIL, HOSTILE, HOSTILE, HOSTILE)
    render.print_findings([finding], wide=False)
    render.print_findings([finding], wide=True)
    _inert(capsys.readouterr().out)

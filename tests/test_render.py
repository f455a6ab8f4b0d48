"""Every table reaper prints is readable at 80 columns: no line wider than the terminal, no
cell cut; columns left out to fit are named (``--wide`` shows them, stacked if need be)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from reaper import sqltext
from reaper.commands import render
from reaper.dev import demo
from tests.support import (  # noqa: F401 (fixtures)
    BUILTIN_SWEEPS,
    emptied_dsn,
    module_dsn_fixture,
    run_reaper,
    small_sizes,
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
        [name, f"public.{name}_table", f"{i * 12345:,}", f"{long} detail of {name}",
         f"GRANT DELETE ON {name} TO reaper"]
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


def lines_fit(text: str, width: int = 80) -> bool:
    return all(len(line) <= width for line in text.splitlines())


@pytest.mark.parametrize(
    "args",
    [["status"], ["status", "--wide"], ["check"], ["check", "--wide"],
     ["run-once", "--dry-run"], ["run-once", "--dry-run", "--wide"], ["run-once"],
     ["indexes", "ensure", "--dry-run"]],
    ids=" ".join,
)
def test_every_table_fits_80_columns(dsn, args) -> None:
    demo.seed(dsn, small_sizes())
    run = run_reaper(*args, env={"REAPER_DSN": dsn, "COLUMNS": "80"})
    # check fails one finding, the role: the tests connect as a superuser.
    assert run.code == (1 if args[0] == "check" else 0), run.stderr
    assert lines_fit(run.stdout), run.stdout
    if args[0] != "indexes":
        for name in SWEEPS:
            assert re.search(rf"(?m)^\s*{name}\b", run.stdout), (name, run.stdout)
    if "--wide" in args and args[0] == "status":
        assert "last autovacuum" in run.stdout


def test_check_at_80_columns_is_short_and_keeps_what_did_not_pass(dsn) -> None:
    run = run_reaper("check", env={"REAPER_DSN": dsn, "COLUMNS": "80"})
    lines = run.stdout.splitlines()
    assert len(lines) < 80, len(lines)
    # The test server's role is a superuser: a warning whose fix is shown whole.
    flat = " ".join(run.stdout.split())
    if "warn" in flat:
        assert "mistake has no limit. Fix: run reaper as the role of" in flat
        # The file's path on this machine, whole (a long one may be folded at 80 columns).
        assert sqltext.where("grants.sql") in "".join(run.stdout.split())


def test_a_dry_run_says_what_its_dependants_count_leaves_out(dsn) -> None:
    demo.seed(dsn, small_sizes())
    for args in (["run-once", "--dry-run"], ["status"]):
        run = run_reaper(*args, env={"REAPER_DSN": dsn, "COLUMNS": "80"})
        flat = " ".join(run.stdout.split())
        assert "note: bootstrap_tokens: counted as its table is now; a real run first lets " \
            "enrollment_requests and enrollment_requests_ephemeral delete up to 300 rows" \
            in flat, run.stdout
    # And the real run frees them: the dry run's 0 tokens was not the projection.
    run = run_reaper("run-once", "--json", env={"REAPER_DSN": dsn})
    tokens = next(r for r in run.json() if r["sweep"] == "bootstrap_tokens")
    assert tokens["rows"] > 0
    # Nothing left before it: no note.
    again = run_reaper("run-once", "--dry-run", env={"REAPER_DSN": dsn, "COLUMNS": "80"})
    assert "note:" not in again.stdout

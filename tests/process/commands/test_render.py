"""Every table reaper prints is readable at 80 columns: no line wider than the terminal, no
cell cut; columns left out to fit are named (``--wide`` shows them, stacked if need be)."""

from __future__ import annotations

import re

import pytest

from reaper import sqltext
from reaper.dev import demo
from tests.support import (
    BUILTIN_SWEEPS,
    run_reaper,
    small_sizes,
)

SWEEPS = [s.name for s in BUILTIN_SWEEPS]


# The real commands, on the demo's rows, at 80 columns.


def lines_fit(text: str, width: int = 80) -> bool:
    return all(len(line) <= width for line in text.splitlines())


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["status", "--wide"],
        ["check"],
        ["check", "--wide"],
        ["run-once", "--dry-run"],
        ["run-once", "--dry-run", "--wide"],
        ["run-once"],
        ["indexes", "ensure", "--dry-run"],
    ],
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


@pytest.mark.fresh_db
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
        assert (
            "note: bootstrap_tokens: counted as its table is now; a real run first lets "
            "enrollment_requests and enrollment_requests_ephemeral delete up to 300 rows" in flat
        ), run.stdout
    # And the real run frees them: the dry run's 0 tokens was not the projection.
    run = run_reaper("run-once", "--json", env={"REAPER_DSN": dsn})
    tokens = next(r for r in run.json() if r["sweep"] == "bootstrap_tokens")
    assert tokens["rows"] > 0
    # Nothing left before it: no note.
    again = run_reaper("run-once", "--dry-run", env={"REAPER_DSN": dsn, "COLUMNS": "80"})
    assert "note:" not in again.stdout

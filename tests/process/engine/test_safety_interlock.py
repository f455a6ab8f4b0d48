"""The full-table interlock: a run that would delete all, or nearly all, of a table of at
least FULL_TABLE_MIN_ROWS rows stops before its first delete (exit 1; the daemon logs and
counts a refusal), naming the sweep, the eligible fraction and the setting that allows it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from reaper.config.settings import FULL_TABLE_MIN_ROWS
from tests.support import run_reaper
from tests.support.safety_interlock import BIG, HALVES, _big, _count, _seed

# Every test here declares tables or functions of its own: a database of its own each.
pytestmark = pytest.mark.fresh_db


@pytest.mark.parametrize(("strategy"), ["auto", "index", "heap"])
def test_a_run_that_would_empty_the_table_stops_before_its_first_delete(
    dsn: str, conn: psycopg.Connection[Any], strategy: str
) -> None:
    _seed(conn, garbage=3000, keep=0)
    run = run_reaper(
        "run-once",
        "--sweep",
        "nodes_silent",
        "--strategy",
        strategy,
        "--json",
        env={"REAPER_DSN": dsn},
    )
    assert run.code == 1, run.stderr
    (result,) = run.json()
    assert result["outcome"] == "refused" and result["rows"] == 0
    error = result["error"]
    assert "sweep nodes_silent: 100.0% of nodes" in error, error
    assert "max_eligible_fraction 0.95" in error and "nothing was deleted" in error
    assert "[sweeps.nodes_silent]" in error and "\n" not in error
    assert _count(conn, "garbage-") == 3000


def test_nearly_all_is_refused_too(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _seed(conn, garbage=2900, keep=100)
    run = run_reaper("run-once", "--sweep", "nodes_silent", env={"REAPER_DSN": dsn})
    assert run.code == 1, run.stderr
    assert "max_eligible_fraction" in run.stdout + run.stderr
    assert _count(conn, "garbage-") == 2900 and _count(conn, "keep-") == 100


def test_below_the_threshold_runs(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _seed(conn, garbage=2000, keep=1000)
    run = run_reaper("run-once", "--sweep", "nodes_silent", env={"REAPER_DSN": dsn})
    assert run.code == 0, run.stderr
    assert _count(conn, "garbage-") == 0 and _count(conn, "keep-") == 1000


def test_a_small_table_is_not_guarded(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _seed(conn, garbage=FULL_TABLE_MIN_ROWS // 2, keep=0)
    run = run_reaper("run-once", "--sweep", "nodes_silent", env={"REAPER_DSN": dsn})
    assert run.code == 0, run.stderr
    assert _count(conn, "garbage-") == 0


def test_a_sweep_opts_in_by_config(dsn: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    _seed(conn, garbage=3000, keep=0)
    config = tmp_path / "reaper.toml"
    config.write_text("[sweeps.nodes_silent]\nmax_eligible_fraction = 1\n")
    run = run_reaper(
        "run-once", "--sweep", "nodes_silent", "--config", str(config), env={"REAPER_DSN": dsn}
    )
    assert run.code == 0, run.stderr
    assert _count(conn, "garbage-") == 0


def test_the_global_setting_opts_in(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _seed(conn, garbage=3000, keep=0)
    run = run_reaper(
        "run-once",
        "--sweep",
        "nodes_silent",
        env={"REAPER_DSN": dsn, "REAPER_MAX_ELIGIBLE_FRACTION": "1"},
    )
    assert run.code == 0, run.stderr
    assert _count(conn, "garbage-") == 0


def test_a_dry_run_counts_and_says_a_real_run_would_be_refused(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    _seed(conn, garbage=3000, keep=0)
    run = run_reaper(
        "run-once", "--dry-run", "--sweep", "nodes_silent", "--json", env={"REAPER_DSN": dsn}
    )
    assert run.code == 0, run.stderr
    (result,) = run.json()
    assert result["rows"] == 3000 and result["outcome"] == "refused"
    assert "sweep nodes_silent: 100.0% of nodes" in result["refusal"], result
    assert "max_eligible_fraction 0.95" in result["refusal"]
    # The table says it too: outcome refused, and one line of figures under it, at 80
    # columns; with the opt-in, no refusal.
    table = run_reaper(
        "run-once", "--dry-run", "--sweep", "nodes_silent", env={"REAPER_DSN": dsn, "COLUMNS": "80"}
    )
    assert table.code == 0, table.stderr
    (row,) = [x for x in table.stdout.splitlines() if x.strip().startswith("nodes_silent ")]
    assert row.split()[-1] == "refused", row
    lines = [x for x in table.stdout.splitlines() if x.startswith("nodes_silent:")]
    assert lines == ["nodes_silent: 3,000 of 3,000 rows eligible (100.0%, counted)"], lines
    opted = run_reaper(
        "run-once",
        "--dry-run",
        "--sweep",
        "nodes_silent",
        "--json",
        "--max-eligible-fraction",
        "1",
        env={"REAPER_DSN": dsn},
    )
    assert opted.json()[0]["refusal"] is None and opted.json()[0]["rows"] == 3000
    assert opted.json()[0]["outcome"] == "success"
    assert _count(conn, "garbage-") == 3000  # nothing deleted


def test_a_dry_run_judges_a_sweep_after_the_ones_before_it_as_a_run_would(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """half_a would delete 950 of 1,900 rows, then half_b the other 950: the dry run says
    that a real run would refuse half_b, as the real run then does."""
    conn.execute(BIG)
    config = tmp_path / "reaper.toml"
    config.write_text(HALVES)
    args = ("run-once", "--sweep", "half_a", "--sweep", "half_b", "--json", "--config", str(config))
    dry = run_reaper(*args, "--dry-run", env={"REAPER_DSN": dsn})
    assert dry.code == 0, dry.stderr
    by_name = {r["sweep"]: r for r in dry.json()}
    assert by_name["half_a"]["rows"] == 950 and by_name["half_a"]["refusal"] is None
    # Counted as the table is now, half_a's rows included; judged as the table would be.
    assert by_name["half_b"]["rows"] == 1900
    assert by_name["half_b"]["outcome"] == "refused"
    refusal = by_name["half_b"]["refusal"]
    assert "950 rows that the sweeps before it would delete from big" in refusal
    assert "100.0% would be gone" in refusal
    # Under the table, the figures add up: its 950 and half_a's 950 are the table's 1,900.
    table = run_reaper(
        *[a for a in args if a != "--json"], "--dry-run", env={"REAPER_DSN": dsn, "COLUMNS": "80"}
    )
    (line,) = [x for x in table.stdout.splitlines() if x.startswith("half_b:")]
    assert line == "half_b: 950 + 950 earlier = 1,900 of 1,900 rows (100.0%, counted)", line
    assert _big(conn) == 1900
    real = run_reaper(*args, env={"REAPER_DSN": dsn})
    assert real.code == 1, real.stderr
    outcomes = {r["sweep"]: r["outcome"] for r in real.json()}
    assert outcomes == {"half_a": "success", "half_b": "refused"}


@pytest.mark.parametrize("value", ["1.5", "-0.1", "most"])
def test_the_setting_is_validated(dsn: str, value: str) -> None:
    run = run_reaper(
        "run-once", "--dry-run", env={"REAPER_DSN": dsn, "REAPER_MAX_ELIGIBLE_FRACTION": value}
    )
    assert run.code == 2 and len(run.stderr_lines) == 1, run.stderr
    assert "MAX_ELIGIBLE_FRACTION" in run.stderr


# -- the table's window: splitting the work over sweeps or runs does not get past it ---------


def test_halves_in_one_invocation_are_judged_together(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """half_a deletes 950 of 1,900 rows (50%); half_b then sees 950 rows, under the
    1,000-row floor alone, but 950 + 950 is 100% of the table at the invocation's start:
    refused, 950 rows kept, exit 1."""
    conn.execute(BIG)
    config = tmp_path / "reaper.toml"
    config.write_text(HALVES)
    run = run_reaper(
        "run-once",
        "--sweep",
        "half_a",
        "--sweep",
        "half_b",
        "--json",
        "--config",
        str(config),
        env={"REAPER_DSN": dsn},
    )
    assert run.code == 1, run.stderr
    by_name = {r["sweep"]: r for r in run.json()}
    assert by_name["half_a"]["outcome"] == "success" and by_name["half_a"]["rows"] == 950
    assert by_name["half_b"]["outcome"] == "refused" and by_name["half_b"]["rows"] == 0
    error = by_name["half_b"]["error"]
    assert "950 rows already deleted from big" in error, error
    assert "100.0% would be gone" in error, error
    assert "max_eligible_fraction 0.95" in error and "\n" not in error
    assert _big(conn) == 950
    # A new invocation is a new window: 950 rows, below the floor, may go.
    again = run_reaper(
        "run-once", "--sweep", "half_b", "--config", str(config), env={"REAPER_DSN": dsn}
    )
    assert again.code == 0, again.stderr
    assert _big(conn) == 0


DISJOINT = """
[sweeps.first_half]
table = "public.big"
reason = "old"
age = "created_at"
where = { part = "first" }
retention = "30d"

[sweeps.most_of_the_rest]
table = "public.big"
reason = "old"
age = "created_at"
where = { part = "rest" }
retention = "30d"
after = ["first_half"]
"""


@pytest.mark.parametrize(("fraction", "refused"), [("0.95", True), ("0.99", False)])
def test_a_dry_run_projects_the_window_of_sweeps_that_share_a_table(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, fraction: str, refused: bool
) -> None:
    """Two sweeps of different rows: 950 of 1,900 rows (50%), then 910 more (1,860 of 1,900
    gone, 97.9%). Each alone is under the threshold; together the second crosses 0.95 and
    not 0.99. The dry run says what the real run then does, and deletes nothing."""
    conn.execute(BIG)
    config = tmp_path / "reaper.toml"
    config.write_text(DISJOINT + f"max_eligible_fraction = {fraction}\n")
    args = (
        "run-once",
        "--sweep",
        "first_half",
        "--sweep",
        "most_of_the_rest",
        "--json",
        "--config",
        str(config),
    )
    dry = run_reaper(*args, "--dry-run", env={"REAPER_DSN": dsn})
    assert dry.code == 0, dry.stderr
    by_name = {r["sweep"]: r for r in dry.json()}
    assert [by_name[n]["rows"] for n in ("first_half", "most_of_the_rest")] == [950, 910]
    assert by_name["first_half"]["refusal"] is None
    assert (by_name["most_of_the_rest"]["refusal"] is not None) is refused, by_name
    assert _big(conn) == 1900
    real = run_reaper(*args, env={"REAPER_DSN": dsn})
    assert real.code == (1 if refused else 0), real.stderr
    assert _big(conn) == (950 if refused else 40)


def test_the_opt_in_lets_the_halves_empty_the_table(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    conn.execute(BIG)
    config = tmp_path / "reaper.toml"
    config.write_text(HALVES + "max_eligible_fraction = 1\n")
    run = run_reaper(
        "run-once",
        "--sweep",
        "half_a",
        "--sweep",
        "half_b",
        "--config",
        str(config),
        env={"REAPER_DSN": dsn},
    )
    assert run.code == 0, run.stderr
    assert _big(conn) == 0


def test_a_real_run_never_leaves_less_than_the_threshold_allows_and_the_dry_run_agrees(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """The demo's data (the testnet audit's): 124,851 nodes, of which the node sweeps together
    would delete 95.6%. A block sample projects 131,420 rows: judged on it, nodes_silent got
    through and left 4.4% of the table. Near the threshold the judgement counts rows: no run
    leaves less than 5%, and the dry run names the sweeps the real run refuses."""
    from reaper.dev import demo

    demo.seed(dsn, demo.Sizes())
    before = int(conn.execute("SELECT count(*) FROM nodes").fetchone()[0])  # type: ignore[index]
    args = ("run-once", "--json")
    dry = run_reaper(*args, "--dry-run", env={"REAPER_DSN": dsn}, timeout=300)
    assert dry.code == 0, dry.stderr
    would_refuse = {r["sweep"] for r in dry.json() if r["refusal"]}
    real = run_reaper(*args, env={"REAPER_DSN": dsn}, timeout=300)
    refused = {
        r["sweep"]
        for r in real.json()
        if r["outcome"] == "refused" and "max_eligible_fraction" in (r["error"] or "")
    }
    assert refused and refused == would_refuse, (dry.stdout, real.stdout)
    after = int(conn.execute("SELECT count(*) FROM nodes").fetchone()[0])  # type: ignore[index]
    assert after / before > 1 - 0.95, f"{before:,} nodes, {after:,} left"

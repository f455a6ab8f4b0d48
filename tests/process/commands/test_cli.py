"""``reaper run-once`` through the real entry point, in a subprocess, as a user runs it.

Bad input gives exactly one line on stderr and exit code 2 (1 when the database cannot be
reached); ``--json`` prints one object per sweep; ``--dry-run`` deletes nothing and reports
the eligible rows; a password in the DSN appears nowhere; and a run over the demo's mix of
rows removes every garbage-* row and keeps every keep-* row.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from reaper.dev import demo
from tests.support import (
    BUILTIN_SWEEPS,
    census,
    run_reaper,
    small_sizes,
)

ALL = [s.name for s in BUILTIN_SWEEPS]
# A DSN nothing listens on: port 1 refuses at once.
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/postgres"
SECRET = "s3cret-Pa55word"


def one_line(run, code: int, *words: str) -> str:
    """The run exited ``code`` with one line on stderr, nothing on stdout, naming ``words``."""
    assert run.code == code, (run.code, run.stderr)
    assert len(run.stderr_lines) == 1, run.stderr
    line = run.stderr_lines[0]
    assert line.startswith("reaper: ")
    for w in words:
        assert w in line, line
    assert run.stdout == ""
    return line


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (
            ["--sweep", "nodes_silent", "--sweep", "no_such_sweep"],
            {},
            ["no_such_sweep", "nodes_silent"],
        ),
        (["--node-retention", "30x"], {}, ["--node-retention", "30x", "30d"]),
        (["--session-retention", "soon"], {}, ["--session-retention", "soon"]),
        (["--session-retention=-72h"], {}, ["--session-retention", "positive"]),
        (["--node-retention", "0s"], {}, ["--node-retention", "positive"]),
        (["--node-retention", "0"], {}, ["--node-retention", "positive"]),
        (["--ephemeral-node-retention", "40d"], {}, ["ephemeral_node_retention", "node_retention"]),
        (["--batch-size", "-5"], {}, ["--batch-size"]),
        ([], {"REAPER_NODE_RETENTION": "-1d"}, ["REAPER_NODE_RETENTION", "positive"]),
        (["--session-retention", "72"], {}, ["--session-retention", "no unit", "72h"]),
        (["--node-retention", "99999999999d"], {}, ["--node-retention", "too long"]),
        (["--node-retention", "9999999d"], {}, ["--node-retention", "100 years"]),
        (["--batch-size", "99999999999999999999"], {}, ["--batch-size", "typo"]),
        (["--batch-size", "abc"], {}, ["--batch-size", "whole number"]),
        (["--batch-size", "1.7"], {}, ["--batch-size", "whole number"]),
        (["--strategy", "fast"], {}, ["strategy", "fast"]),
        (["--no-such-flag"], {}, ["--no-such-flag"]),
        (["--metrics-file", "/no-such-dir/reaper.prom"], {}, ["--metrics-file", "/no-such-dir"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, env, words) -> None:
    # Checked before any connection: the DSN points nowhere.
    run = run_reaper("run-once", *args, env={"REAPER_DSN": UNREACHABLE, **env})
    one_line(run, 2, *words)


def test_unknown_toml_key(tmp_path: Path) -> None:
    config = tmp_path / "reaper.toml"
    config.write_text('node_retention = "30d"\nnode_retension = "7d"\n')
    run = run_reaper("run-once", "--config", str(config), env={"REAPER_DSN": UNREACHABLE})
    one_line(run, 2, str(config), "node_retension")


def test_bad_toml(tmp_path: Path) -> None:
    config = tmp_path / "reaper.toml"
    config.write_text("node_retention = \n")
    run = run_reaper("run-once", "--config", str(config), env={"REAPER_DSN": UNREACHABLE})
    one_line(run, 2, str(config), "TOML")
    missing = tmp_path / "absent.toml"
    run = run_reaper("run-once", "--config", str(missing), env={"REAPER_DSN": UNREACHABLE})
    assert run.code == 2 and len(run.stderr_lines) == 1, run.stderr


def test_unknown_sweep_in_toml(tmp_path: Path) -> None:
    config = tmp_path / "reaper.toml"
    config.write_text("[sweeps.nodes_slient]\nenabled = false\n")
    run = run_reaper("run-once", "--config", str(config), env={"REAPER_DSN": UNREACHABLE})
    one_line(run, 2, "nodes_slient")


def test_unreachable_database_is_one_line_and_exit_1() -> None:
    dsn = make_conninfo(UNREACHABLE, password=SECRET)
    run = run_reaper("run-once", env={"REAPER_DSN": dsn})
    line = one_line(run, 1, "cannot connect", "127.0.0.1", "1")
    assert SECRET not in line


def test_invalid_dsn_names_the_setting_not_the_password() -> None:
    run = run_reaper("run-once", "--dsn", f"host=127.0.0.1 password={SECRET} colour=blue")
    line = one_line(run, 2, "--dsn")
    assert SECRET not in line


@pytest.mark.parametrize(
    "dsn",
    [
        # libpq's complaint quotes the bad token: the password itself.
        "postgresql://postgres:Sekr%zzTopPw@127.0.0.1:5432/postgres",
        "host=127.0.0.1 password='Sekr%zzTopPw",
    ],
)
def test_an_unparsable_dsn_never_shows_its_password(dsn: str) -> None:
    run = run_reaper("run-once", "--dsn", dsn)
    line = one_line(run, 2, "--dsn")
    assert "Sekr" not in line and "TopPw" not in line


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path) -> None:
    bad = tmp_path / "reaper.toml"
    bad.write_bytes(b"\xff\xfe\n")
    one_line(run_reaper("run-once", "--config", str(bad)), 2, "UTF-8")


def test_json_output_shape(dsn, conn) -> None:
    demo.seed(dsn, small_sizes())
    run = run_reaper("run-once", "--json", env={"REAPER_DSN": dsn})
    assert run.code == 0, run.stderr
    results = run.json()
    assert [r["sweep"] for r in results] == ALL
    for r, s in zip(results, BUILTIN_SWEEPS, strict=True):
        assert set(r) >= {"sweep", "table", "reason", "rows", "batches", "seconds", "outcome"}
        assert (r["table"], r["reason"], r["outcome"]) == (s.table, s.reason, "success")
        assert isinstance(r["rows"], int) and r["rows"] > 0
        assert isinstance(r["batches"], int) and r["batches"] >= 1
        assert isinstance(r["seconds"], int | float) and r["seconds"] >= 0
        assert r["dry_run"] is False and r["error"] is None
        assert set(r["cutoffs"]) >= {"cutoff"}
    # The logs went to stderr as JSON lines, one sweep_finished per sweep.
    finished = [e for e in run.events() if e["event"] == "sweep_finished"]
    assert [e["sweep"] for e in finished] == ALL
    for e in finished:
        assert {"rows", "batches", "seconds", "cutoffs", "table", "reason"} <= set(e)
        assert e["level"] == "info"


def test_sweeps_run_in_dependency_order_whatever_the_flags_say(dsn) -> None:
    run = run_reaper(
        "run-once",
        "--json",
        "--sweep",
        "bootstrap_tokens",
        "--sweep",
        "enrollment_requests",
        env={"REAPER_DSN": dsn},
    )
    assert run.code == 0, run.stderr
    assert [r["sweep"] for r in run.json()] == ["enrollment_requests", "bootstrap_tokens"]


def test_dry_run_deletes_nothing_and_reports_eligible_rows(dsn, conn) -> None:
    demo.seed(dsn, small_sizes())
    before = census(conn)
    run = run_reaper("run-once", "--dry-run", "--json", env={"REAPER_DSN": dsn})
    assert run.code == 0, run.stderr
    assert census(conn) == before
    z = small_sizes()
    eligible = {r["sweep"]: r["rows"] for r in run.json()}
    assert all(r["dry_run"] for r in run.json())
    assert eligible == {
        "nodes_session": z.nodes_session_lapsed,
        "nodes_silent": z.nodes_silent,
        "nodes_ephemeral": z.nodes_ephemeral_silent,
        "enrollment_requests": z.requests_stale - demo.ephemeral_requests(z),
        "enrollment_requests_ephemeral": demo.ephemeral_requests(z),
        # Tokens referenced by a stale request are not eligible until the requests go.
        "bootstrap_tokens": 0,
        "router_leases": z.routers_expired,
    }
    # The table says "eligible", and nothing was deleted.
    table = run_reaper("run-once", "--dry-run", env={"REAPER_DSN": dsn})
    assert table.code == 0
    assert "eligible" in table.stdout and "dry run" in table.stdout
    assert census(conn) == before


def test_run_once_removes_every_garbage_row_and_keeps_every_live_one(dsn, conn) -> None:
    demo.seed(dsn, small_sizes())
    before = census(conn)
    run = run_reaper("run-once", env={"REAPER_DSN": dsn})
    assert run.code == 0, run.stderr
    after = census(conn)
    for table, counts in after.items():
        assert counts == {"garbage": 0, "keep": before[table]["keep"]}, table
    # The table on stdout: one row per sweep.
    for name in ALL:
        assert name in run.stdout


@pytest.mark.parametrize("strategy", ["heap", "index"])
def test_each_strategy_gives_the_same_end_result(dsn, conn, strategy) -> None:
    demo.seed(dsn, small_sizes())
    before = census(conn)
    run = run_reaper(
        "run-once",
        "--json",
        "--strategy",
        strategy,
        "--batch-size",
        "7",
        env={"REAPER_DSN": dsn},
    )
    assert run.code == 0, run.stderr
    assert {r["strategy"] for r in run.json()} == {strategy}
    for table, counts in census(conn).items():
        assert counts == {"garbage": 0, "keep": before[table]["keep"]}, table


@pytest.mark.fresh_db
def test_a_password_never_appears(dsn, conn, tmp_path) -> None:
    """Not on a successful run with debug logs, not in the metrics file, not when a sweep
    fails. A role of its own whose password is SECRET, so the password is used where the
    server asks for one (and accepted unused where it trusts)."""
    demo.seed(dsn, small_sizes())
    conn.execute(sql.SQL("DROP TABLE routers"))
    role = f"reaper_secret_{uuid.uuid4().hex[:8]}"
    conn.execute(
        sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(SECRET)
        )
    )
    with_password = make_conninfo(dsn, user=role, password=SECRET)
    metrics_file = tmp_path / "reaper.prom"
    for args in (["--metrics-file", str(metrics_file)], ["--json"]):
        run = run_reaper(
            "--log-level", "debug", "run-once", *args, env={"REAPER_DSN": with_password}
        )
        assert run.code == 1, run.stderr  # router_leases fails: its table is gone
        assert "sweep_failed" in run.stderr
        assert SECRET not in run.stdout + run.stderr
    assert SECRET not in metrics_file.read_text()
    run = run_reaper("run-once", "--dsn", with_password, "--dry-run")
    assert SECRET not in run.stdout + run.stderr
    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


SERVICE_KEYS = {"PGHOST": "host", "PGPORT": "port", "PGUSER": "user", "PGDATABASE": "dbname"}


def libpq_environment(dsn: str) -> dict[str, str]:
    """The PG* variables that name the same database as ``dsn``."""
    from psycopg.conninfo import conninfo_to_dict

    names = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "dbname": "PGDATABASE"}
    params = conninfo_to_dict(dsn)
    return {var: str(params[key]) for key, var in names.items() if params.get(key)}


def test_the_connection_can_come_from_libpq_variables(dsn, conn) -> None:
    demo.seed(dsn, small_sizes())
    run = run_reaper("run-once", "--json", env=libpq_environment(dsn))
    assert run.code == 0, run.stderr
    assert sum(r["rows"] for r in run.json()) > 0
    assert census(conn)["routers"]["garbage"] == 0


def test_the_connection_can_come_from_a_service_file(dsn, conn, tmp_path: Path) -> None:
    demo.seed(dsn, small_sizes())
    lines = [f"{SERVICE_KEYS[k]}={v}" for k, v in libpq_environment(dsn).items()]
    service_file = tmp_path / "pg_service.conf"
    service_file.write_text("[reaper_test]\n" + "\n".join(lines) + "\n")
    run = run_reaper(
        "run-once",
        "--json",
        env={"PGSERVICEFILE": str(service_file), "REAPER_DSN": "service=reaper_test"},
    )
    assert run.code == 0, run.stderr
    assert census(conn)["routers"]["garbage"] == 0


@pytest.mark.parametrize(
    ("args", "usage"),
    [((), "Usage: reaper [OPTIONS] COMMAND"), (("indexes",), "Usage: reaper indexes [OPTIONS]")],
)
def test_a_group_without_its_command_prints_its_help(args: tuple[str, ...], usage: str) -> None:
    run = run_reaper(*args, env={"REAPER_DSN": UNREACHABLE})
    assert run.code == 2, run.stderr
    assert run.stderr.startswith(usage), run.stderr
    assert "reaper: " not in run.stderr and "(see 'reaper" not in run.stderr
    assert "Commands:" in run.stderr and "Traceback" not in run.stderr

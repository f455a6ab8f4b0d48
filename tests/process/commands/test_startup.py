"""What a start of ``reaper`` loads, in a fresh interpreter: the command line alone, its
version and reaper's help load none of the heavy packages (the driver, the SQL parser,
structlog, rich, the pool, the metrics client, the scheduler); a command's help loads only
what names the built-in sweeps (the driver, the SQL parser), and a bad flag or value loads
no more than reading the configuration does (not the pool, the metrics client nor the
scheduler); ``run-once`` loads neither the scheduler nor the backlog count of ``status``.
The figures are in ``make bench`` (its start-up table)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support import credentials

# What no start before a command runs may load.
NEVER = {"psycopg_pool", "prometheus_client", "apscheduler"}
# Nor these, before the built-in sweeps are read (a command's help names them).
NO_COMMAND = NEVER | {"psycopg", "pglast", "structlog", "rich"}

_PROBE = (
    "import atexit, json, sys\n"
    "def _report():\n"
    "    loaded = sorted(sys.modules)\n"
    "    sys.__stderr__.write('LOADED ' + json.dumps(loaded) + '\\n')\n"
    "atexit.register(_report)\n"
    "if sys.argv[1:] == ['--import-only']:\n"
    "    import reaper.cli\n"
    "else:\n"
    "    from reaper.cli import main\n"
    "    main(sys.argv[1:])\n"
)


def loaded(*args: str, env: dict[str, str] | None = None) -> tuple[int, set[str]]:
    """``reaper ARGS`` in a fresh interpreter: its exit code and the packages it had loaded
    when it exited (top-level names, and reaper's modules by their full names)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("REAPER_", "PG"))}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        env={**base, **credentials(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [x for x in proc.stderr.splitlines() if x.startswith("LOADED ")]
    assert lines, proc.stderr
    names = json.loads(lines[-1].removeprefix("LOADED "))
    return proc.returncode, {n if n.startswith("reaper.") else n.split(".")[0] for n in names}


@pytest.mark.parametrize(
    "args", [("--import-only",), ("--version",), ("--help",), ("indexes", "--help")]
)
def test_no_command_loads_no_heavy_package(args: tuple[str, ...]) -> None:
    code, modules = loaded(*args)
    assert code == 0
    assert modules & NO_COMMAND == set()


@pytest.mark.parametrize(
    ("args", "exit_code"),
    [
        (("run-once", "--help"), 0),
        (("status", "--help"), 0),
        (("indexes", "ensure", "--help"), 0),
        (("run-once", "--batch-size", "-5"), 2),
        (("check", "--node-retention", "30x"), 2),
        (("status", "--max-count", "0"), 2),
        (("run", "--listen", "nowhere"), 2),
    ],
)
def test_help_and_bad_input_load_no_pool_metrics_or_scheduler(
    args: tuple[str, ...], exit_code: int
) -> None:
    code, modules = loaded(*args)
    assert code == exit_code
    assert modules & NEVER == set()
    if "--help" in args:
        assert modules & {"structlog", "rich"} == set()


def test_run_once_loads_neither_the_scheduler_nor_the_backlog_count(dsn: str) -> None:
    code, modules = loaded("run-once", "--json", env={"REAPER_DSN": dsn})
    assert code == 0
    assert "psycopg_pool" in modules  # it did run
    assert modules & {"apscheduler", "reaper.daemon", "reaper.commands.status"} == set()


@pytest.mark.parametrize("table", [True, False], ids=["table", "json"])
def test_run_once_loads_no_sql_parser_and_rich_only_for_its_table(dsn: str, table: bool) -> None:
    # Off a terminal: JSON log lines, no progress bars. The built-in sweeps' analysis ships
    # as data; rich draws the table of results, and never a log line's traceback here; no
    # metrics file, no metrics.
    code, modules = loaded("run-once", *([] if table else ["--json"]), env={"REAPER_DSN": dsn})
    assert code == 0
    assert "psycopg_pool" in modules  # it did run
    assert modules & {"pglast", "pygments", "attr", "prometheus_client"} == set()
    assert ("rich" in modules) is table


def test_run_once_loads_the_metrics_client_for_its_metrics_file(dsn: str, tmp_path) -> None:
    path = tmp_path / "reaper.prom"
    code, modules = loaded(
        "run-once", "--json", "--metrics-file", str(path), env={"REAPER_DSN": dsn}
    )
    assert code == 0
    assert "prometheus_client" in modules
    assert "reaper_sweep_runs_total{" in path.read_text()


_LOG_PROBE = (
    "import json, sys\n"
    "from reaper import log\n"
    "log.configure('info', json=sys.argv[1] == 'json')\n"
    "import structlog\n"
    "try:\n"
    "    1 / 0\n"
    "except ZeroDivisionError:\n"
    "    structlog.get_logger('reaper.test').exception('sweep_failed', sweep='s')\n"
    "sys.__stderr__.write('RICH ' + json.dumps('rich' in sys.modules) + '\\n')\n"
)


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_a_logged_exception_keeps_its_traceback_without_rich(fmt: str) -> None:
    # Logging loads structlog without rich, whatever the format: reaper draws a traceback
    # itself, whole, and never with a frame's local variables.
    proc = subprocess.run(
        [sys.executable, "-c", _LOG_PROBE, fmt],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rich = json.loads(proc.stderr.splitlines()[-1].removeprefix("RICH "))
    assert rich is False
    if fmt == "json":
        record = json.loads(next(x for x in proc.stderr.splitlines() if x.startswith("{")))
        assert record["event"] == "sweep_failed"
        assert "Traceback (most recent call last)" in record["exception"]
        assert "ZeroDivisionError" in record["exception"]
    else:
        assert "Traceback (most recent call last)" in proc.stderr
        assert "ZeroDivisionError" in proc.stderr and "locals" not in proc.stderr

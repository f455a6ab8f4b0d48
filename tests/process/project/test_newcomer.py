"""The newcomer's path: the commands `make demo` prints next, and the README shows, work as
printed, against the server `make demo-server` keeps up."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from reaper.dev import demo, devserver
from tests.support import credentials, reaper_executable, run_reaper, small_sizes
from tests.support.daemon import free_port, http_get, wait_for
from tests.support.newcomer import ROOT, printed_commands


@pytest.fixture
def demo_server(pg_server: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``make demo-server`` (``python -m reaper.dev.demo --serve``) against the test server, on a
    database of its own; yields the process and what it printed up to its next steps."""
    name = f"reaper_demo_{uuid.uuid4().hex[:8]}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("REAPER_", "PG"))},
        **credentials(),
        "REAPER_DSN": pg_server,
        "REAPER_DEMO_DATABASE": name,
        "REAPER_DEMO_DIR": str(tmp_path / "demo"),
        "PYTHONUNBUFFERED": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "reaper.dev.demo", "--serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "".join(out)
            out.append(line)
            if line.startswith("(`source"):
                break
        yield proc, "".join(out)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        finally:
            devserver.drop_database(devserver.with_dbname(pg_server, name))


def shell(command: str, env_file: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REAPER_", "PG"))}
    return subprocess.run(
        ["bash", "-c", f"source {env_file} && {command}"],
        cwd=ROOT,
        env={**env, **credentials(), "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_the_printed_next_commands_work(demo_server, tmp_path: Path) -> None:
    proc, out = demo_server
    assert "Ctrl-C stops it" in out
    commands = printed_commands(out[out.index("In another terminal:") :])
    source, *rest = commands
    env_file = source.removeprefix("source ")
    assert (ROOT / env_file).exists() or Path(env_file).exists(), env_file
    daemon = next(c for c in rest if " run --listen " in c)
    curl = next(c for c in rest if c.startswith("curl "))
    for command in rest:
        if command in (daemon, curl):
            continue
        done = shell(command, env_file)
        # The demo's server has one role, a superuser: check fails that finding alone.
        superuser_only = (
            " check" in command and "1 failed" in done.stdout and "superuser" in done.stdout
        )
        if superuser_only:
            # The README's demo path says why, where it shows the command.
            readme = (ROOT / "README.md").read_text()
            assert "exits 1 here" in readme and "superuser" in readme
        assert done.returncode == (1 if superuser_only else 0), (
            command,
            done.stdout[-2000:],
            done.stderr[-2000:],
        )
        assert all(len(line) <= 80 for line in done.stdout.splitlines()), command
    # The daemon and the scrape, on a free port instead of the printed one (tests run at once).
    port = free_port()
    daemon = daemon.replace(":9465", f":{port}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REAPER_", "PG"))}
    run = subprocess.Popen(
        ["bash", "-c", f"source {env_file} && exec {daemon}"],
        cwd=ROOT,
        env={**env, **credentials()},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def deleted() -> float:
            try:
                _, body = http_get(port, "/metrics")
            except OSError:
                return 0
            return sum(
                float(v) for v in re.findall(r"^reaper_deleted_rows_total\{.*\} (\S+)$", body, re.M)
            )

        wait_for("the daemon deleted rows", lambda: deleted() > 100_000, limit=120)
        scraped = shell(curl.replace(":9465", f":{port}"), env_file)
        assert scraped.returncode == 0 and "reaper_deleted_rows_total{" in scraped.stdout
    finally:
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 0
    assert proc.poll() is None, "the demo server stays up until Ctrl-C"


def test_the_env_file_is_private_and_sourceable(tmp_path: Path) -> None:
    dsn = "postgresql://u:p w'd@h/db"
    path = demo.write_env_file(tmp_path, dsn)
    assert path.stat().st_mode & 0o777 == 0o600
    done = subprocess.run(
        ["bash", "-c", f'source {path} && printf %s "$REAPER_DSN"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == dsn


# A database without the tables: one line that names the database reaper reached.


@pytest.fixture
def empty_db(pg_server: str) -> Iterator[str]:
    dsn = devserver.create_database(pg_server)
    yield dsn
    devserver.drop_database(dsn)


def reaper_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("reaper:")]


@pytest.mark.parametrize(
    "args",
    [
        ["run-once"],
        ["run-once", "--dry-run"],
        ["status"],
        ["indexes", "ensure"],
        ["indexes", "ensure", "--dry-run"],
    ],
)
def test_a_database_without_the_tables_is_named_once(empty_db, args) -> None:
    name = str(conninfo_to_dict(empty_db)["dbname"])
    run = run_reaper(*args, env={"REAPER_DSN": empty_db})
    assert run.code == 1
    lines = reaper_lines(run.stderr)
    assert len(lines) == 1, run.stderr
    assert (
        f"/{name}, has no table bootstrap_tokens, enrollment_requests, nodes, routers" in lines[0]
    )
    assert "sweep_failed" not in run.stderr and "does not exist" not in run.stdout


def test_without_a_dsn_the_error_says_libpq_chose_the_database(empty_db) -> None:
    params = conninfo_to_dict(empty_db)
    env = {
        "PGHOST": str(params.get("host", "")),
        "PGPORT": str(params.get("port", "")),
        "PGUSER": str(params.get("user", "")),
        "PGDATABASE": str(params["dbname"]),
    }
    run = run_reaper("run-once", env={k: v for k, v in env.items() if v})
    (line,) = reaper_lines(run.stderr)
    assert f"/{params['dbname']} (no --dsn or REAPER_DSN: libpq chose it" in line


@pytest.mark.fresh_db
def test_some_tables_missing_are_named_once_and_the_others_swept(dsn, conn) -> None:
    demo.seed(dsn, small_sizes())
    conn.execute("DROP TABLE nodes")
    run = run_reaper("run-once", env={"REAPER_DSN": dsn})
    assert run.code == 1
    (event,) = [e for e in run.events() if e["event"] == "tables_missing"]
    assert event["tables"] == ["nodes"]
    assert event["database"].endswith("/" + str(conninfo_to_dict(dsn)["dbname"]))
    assert conn.execute(
        "SELECT count(*) FROM routers WHERE router_id LIKE 'garbage-%'"
    ).fetchone() == (0,)


# Typos get a suggestion; an option on the wrong side of the command says where it goes.


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (
            'node_retension = "10d"\n',
            "unknown setting 'node_retension'; did you mean 'node_retention'?",
        ),
        ('node-retension = "10d"\n', "did you mean 'node_retention'?"),
        ("batchsize = 5\n", "did you mean 'batch_size'?"),
        (
            '[sweeps.nodes_silent]\nretension = "10d"\n',
            "[sweeps.nodes_silent] has unknown key(s) retension; did you mean 'retention'?",
        ),
        ("[sweeps.nodes_silent]\nenable = false\n", "did you mean 'enabled'?"),
        ("zzz = 1\n", "unknown setting 'zzz'; known settings: backlog_limit, batch_size"),
    ],
)
def test_a_toml_typo_gets_a_suggestion(tmp_path: Path, toml: str, expected: str) -> None:
    path = tmp_path / "reaper.toml"
    path.write_text(toml)
    run = run_reaper("run-once", "--config", str(path), env={"REAPER_DSN": "host=/nonexistent"})
    assert run.code == 2
    assert expected in run.stderr and run.stderr.count("\n") == 1, run.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run-once", "--log-level", "debug"], "'reaper --log-level debug run-once'"),
        (["status", "--log-format=json"], "'reaper --log-format=json status'"),
        (
            ["indexes", "ensure", "--log-level", "debug"],
            "'reaper --log-level debug indexes ensure'",
        ),
        (
            ["--dry-run", "run-once"],
            "--dry-run goes after the command: 'reaper run-once --dry-run'",
        ),
        (["--batch-size", "5", "run-once"], "'reaper run-once --batch-size 5'"),
    ],
)
def test_an_option_on_the_wrong_side_says_where_it_goes(args, expected) -> None:
    run = run_reaper(*args, env={"REAPER_DSN": "host=/nonexistent"})
    assert run.code == 2
    assert expected in run.stderr and run.stderr.count("\n") == 1, run.stderr


def on_a_terminal(*args: str, env: dict[str, str]) -> str:
    """Run ``reaper`` with stdout and stderr on a pseudo-terminal; return what it printed."""
    main, child = pty.openpty()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("REAPER_", "PG"))}
    proc = subprocess.Popen(
        [reaper_executable(), *args],
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=child,
        env={**base, **credentials(), **env},
    )
    os.close(child)
    out = b""
    deadline = time.monotonic() + 60
    try:
        while True:
            ready, _, _ = select.select([main], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                proc.kill()
                raise AssertionError(f"reaper {' '.join(args)} still running after 60 s: {out!r}")
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the terminal's other side closed: the process has ended
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(main)
    assert proc.wait(timeout=60) == 0, out
    return out.decode(errors="replace")


def test_a_command_on_a_terminal_shows_its_table_not_info_lines(dsn, conn) -> None:
    demo.seed(dsn, small_sizes())
    env = {"REAPER_DSN": dsn, "REAPER_MAX_ELIGIBLE_FRACTION": "1", "COLUMNS": "100"}
    shown = on_a_terminal("run-once", env=env)
    assert "router_leases" in shown and "deleted" in shown
    assert "sweep_finished" not in shown
    # Asked for, the info lines come back; off a terminal (a pipe: systemd, kubectl logs)
    # they are there by default.
    assert "sweep_finished" in on_a_terminal("--log-level", "info", "run-once", env=env)
    assert "sweep_finished" in run_reaper("run-once", env=env).stderr

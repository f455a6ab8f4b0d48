"""The newcomer's path: the commands `make demo` prints next, and the README shows, work as
printed, against the server `make demo-server` keeps up."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reaper import demo, devserver
from tests.daemon_helpers import free_port, http_get, wait_for
from tests.support import credentials

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.db


def printed_commands(text: str) -> list[str]:
    """The indented command lines of :func:`reaper.demo.next_steps`' text, comments cut."""
    return [
        line.split("  #")[0].strip()
        for line in text.splitlines()
        if line.startswith("  ") and not line.startswith("   ")
    ]


@pytest.fixture
def demo_server(pg_server: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``make demo-server`` (``python -m reaper.demo --serve``) against the test server, on a
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
        [sys.executable, "-m", "reaper.demo", "--serve"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
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
        cwd=ROOT, env={**env, **credentials(), "COLUMNS": "80"},
        capture_output=True, text=True, timeout=timeout, check=False,
    )


def test_the_printed_next_commands_work(demo_server, tmp_path: Path) -> None:
    proc, out = demo_server
    assert "Ctrl-C stops it" in out
    commands = printed_commands(out[out.index("In another terminal:"):])
    source, *rest = commands
    env_file = source.removeprefix("source ")
    assert (ROOT / env_file).exists() or Path(env_file).exists(), env_file
    daemon = next(c for c in rest if " run --listen " in c)
    curl = next(c for c in rest if c.startswith("curl "))
    for command in rest:
        if command in (daemon, curl):
            continue
        done = shell(command, env_file)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        assert all(len(line) <= 80 for line in done.stdout.splitlines()), command
    # The daemon and the scrape, on a free port instead of the printed one (tests run at once).
    port = free_port()
    daemon = daemon.replace(":9465", f":{port}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REAPER_", "PG"))}
    run = subprocess.Popen(
        ["bash", "-c", f"source {env_file} && exec {daemon}"],
        cwd=ROOT, env={**env, **credentials()},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
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


def test_make_demo_ends_with_the_readmes_next_commands(tmp_path: Path) -> None:
    env_file = tmp_path / "reaper.env"
    text = demo.next_steps(env_file, serving=False)
    assert "make demo-server" in text
    assert re.search(r"^demo-server:", (ROOT / "Makefile").read_text(), re.M)
    readme = (ROOT / "README.md").read_text()
    if Path(sys.executable).parent == ROOT / ".venv" / "bin":
        for command in printed_commands(text)[2:]:  # after make demo-server and source FILE
            assert command in readme, command


def test_the_env_file_is_private_and_sourceable(tmp_path: Path) -> None:
    dsn = "postgresql://u:p w'd@h/db"
    path = demo.write_env_file(tmp_path, dsn)
    assert path.stat().st_mode & 0o777 == 0o600
    done = subprocess.run(
        ["bash", "-c", f"source {path} && printf %s \"$REAPER_DSN\""],
        capture_output=True, text=True, check=True,
    )
    assert done.stdout == dsn

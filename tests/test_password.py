"""A server that asks for a password: libpq's PGPASSWORD or password file reaches every
connection, the test's own and those of the reaper processes it starts, with the password
never in the DSN. A throwaway cluster of our own (scram-sha-256 on TCP), stopped afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reaper.dev import demo, devserver
from tests.daemon_helpers import free_port, http_get, start_reaper, wait_for
from tests.support import run_reaper, small_sizes

pytestmark = pytest.mark.db
BIN = Path("/usr/lib/postgresql/15/bin")
PASSWORD = "s3cret-for-tests"


def _as_postgres(*cmd: str) -> list[str]:
    """Run as the postgres user when we are root (initdb refuses root)."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return list(cmd)


@pytest.fixture(scope="module")
def password_server() -> Iterator[str]:
    """DSN (no password in it) of a fresh cluster whose every TCP login needs a password."""
    initdb = shutil.which("initdb") or str(BIN / "initdb")
    if not Path(initdb).exists() or (os.geteuid() == 0 and not shutil.which("runuser")):
        pytest.skip("initdb is not installed (apt-get install postgresql)")
    pg_ctl = str(Path(initdb).parent / "pg_ctl")
    root = Path(tempfile.mkdtemp(prefix="reaper-docs-pw-"))
    data, pwfile = root / "data", root / "pw"
    pwfile.write_text(PASSWORD + "\n")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(pwfile, "postgres")
    port = free_port()
    subprocess.run(
        _as_postgres(initdb, "-D", str(data), "-U", "postgres", "--auth=scram-sha-256",
                     f"--pwfile={pwfile}"),
        check=True, capture_output=True, timeout=120,
    )
    subprocess.run(
        _as_postgres(pg_ctl, "-D", str(data), "-w", "-l", str(root / "log"), "-o",
                     f"-p {port} -k {root} -c listen_addresses=127.0.0.1", "start"),
        check=True, capture_output=True, timeout=120,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_postgres(pg_ctl, "-D", str(data), "-m", "immediate", "stop"),
                       capture_output=True, timeout=120, check=False)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def seeded(password_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A database with the demo's rows on the password server, made with PGPASSWORD set."""
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    dsn = devserver.create_database(password_server)
    devserver.load_schema(dsn)
    demo.seed(dsn, small_sizes())
    yield dsn
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    devserver.drop_database(dsn)


def test_the_server_refuses_a_login_without_the_password(seeded, monkeypatch) -> None:
    monkeypatch.delenv("PGPASSWORD")
    monkeypatch.setenv("PGPASSFILE", "/nonexistent")
    run = run_reaper("run-once", "--dry-run", env={"REAPER_DSN": seeded})
    assert run.code == 1
    assert "password" in run.stderr and PASSWORD not in run.stderr


def test_pgpassword_reaches_the_reaper_a_test_runs(seeded) -> None:
    assert "s3cret" not in seeded
    run = run_reaper("run-once", "--json", env={"REAPER_DSN": seeded})
    assert run.code == 0, run.stderr
    assert sum(r["rows"] for r in run.json()) > 0
    assert demo.census(seeded)["routers"]["garbage"] == 0


def test_a_password_file_reaches_the_reaper_a_test_runs(seeded, monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("PGPASSWORD")
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:*:*:postgres:{PASSWORD}\n")
    passfile.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    run = run_reaper("status", "--json", env={"REAPER_DSN": seeded})
    assert run.code == 0, run.stderr
    assert {r["sweep"] for r in run.json()} >= {"nodes_silent", "router_leases"}


def test_pgpassword_reaches_the_daemon_a_test_starts(seeded, tmp_path) -> None:
    port = free_port()
    daemon = start_reaper(
        ["run", "--listen", f"127.0.0.1:{port}", "--interval", "1m"], tmp_path,
        env={"REAPER_DSN": seeded},
    )
    try:
        wait_for("ready", lambda: http_get(port, "/readyz")[0] == 200, limit=60)
        deadline = time.monotonic() + 60
        while demo.census(seeded)["routers"]["garbage"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert demo.census(seeded)["routers"]["garbage"] == 0
    finally:
        assert daemon.terminate() == 0

"""A server that asks for a password: libpq's PGPASSWORD or password file reaches every
connection, the test's own and those of the reaper processes it starts, with the password
never in the DSN. A throwaway cluster of our own (scram-sha-256 on TCP), stopped afterwards."""

from __future__ import annotations

import time

from reaper.dev import demo
from tests.support import PASSWORD, run_reaper
from tests.support.daemon import free_port, http_get, start_reaper, wait_for


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
        ["run", "--listen", f"127.0.0.1:{port}", "--interval", "1m"],
        tmp_path,
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

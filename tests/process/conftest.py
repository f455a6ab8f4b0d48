"""Fixtures of the process layer: servers of the tests' own.

``password_server``: a throwaway cluster whose every login needs a password (scram-sha-256),
``seeded``: a database with the demo's rows on it; ``pgbouncer``: a PgBouncer of the test's
own in front of the test database.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from reaper.dev import demo, devserver
from tests.support import PASSWORD, small_sizes
from tests.support.daemon import free_port, wait_for

BIN = Path("/usr/lib/postgresql/15/bin")


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
        _as_postgres(
            initdb, "-D", str(data), "-U", "postgres", "--auth=scram-sha-256", f"--pwfile={pwfile}"
        ),
        check=True,
        capture_output=True,
        timeout=120,
    )
    subprocess.run(
        _as_postgres(
            pg_ctl,
            "-D",
            str(data),
            "-w",
            "-l",
            str(root / "log"),
            "-o",
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1",
            "start",
        ),
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            _as_postgres(pg_ctl, "-D", str(data), "-m", "immediate", "stop"),
            capture_output=True,
            timeout=120,
            check=False,
        )
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


@pytest.fixture
def pgbouncer(dsn: str) -> Iterator[Any]:
    """``start(pool_mode)`` -> the DSN of the test database through a PgBouncer of the test's
    own in that pool mode (skipped where pgbouncer is not installed)."""
    exe = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
    )
    if exe is None:
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    target = conninfo_to_dict(dsn)
    if str(target.get("host", "/")).startswith("/"):
        # pgserver listens on a socket in a directory only its own user may enter.
        pytest.skip("the PgBouncer tests need a server on TCP (REAPER_TEST_DSN)")
    # A server that asks for a password gets the test's own (PGPASSWORD, or the DSN's).
    password = target.get("password") or os.environ.get("PGPASSWORD")
    procs: list[subprocess.Popen[bytes]] = []
    work = Path(tempfile.mkdtemp(prefix="reaper-pgb-"))
    work.chmod(0o777)

    def start(pool_mode: str, default_pool_size: int | None = None) -> str:
        port = free_port()
        # PgBouncer logs in to the server as the user of auth_file, with its password there
        # (a password in [databases] is used only beside a user= there).
        (work / "users.txt").write_text(f'"postgres" "{password or ""}"\n')
        ini = work / f"{pool_mode}.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host={target.get('host', 'localhost')} port={target.get('port', 5432)}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {work}/users.txt\npool_mode = {pool_mode}\n"
            f"logfile = {work}/{pool_mode}.log\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            + (f"default_pool_size = {default_pool_size}\n" if default_pool_size else "")
        )
        user = ["-u", "postgres"] if os.geteuid() == 0 else []
        procs.append(
            subprocess.Popen(
                [exe, *user, str(ini)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
        out = make_conninfo(dsn, host="127.0.0.1", port=port, user="postgres")
        wait_for("pgbouncer", lambda: _answers(out), limit=20)
        return out

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)
    shutil.rmtree(work, ignore_errors=True)


def _answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=2):
            return True
    except psycopg.Error:
        return False

"""A throwaway primary and streaming standby (initdb + ``pg_basebackup -R``), for bench B6 and
the replica-lag test: never the shared server.

The server binaries come from ``REAPER_PG_BIN``, else ``/usr/lib/postgresql/15/bin``, else
``pg_config --bindir``. initdb refuses to run as root: as root, every server command runs as
the ``postgres`` user (``runuser``) in a directory it owns. Ports are picked free at run
time; both servers are stopped (immediate) and their directory removed at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

DEFAULT_BIN = Path("/usr/lib/postgresql/15/bin")
STANDBY_NAME = "standby1"


def pg_bin() -> Path | None:
    """The directory of initdb, pg_ctl and pg_basebackup, or None when there is none."""
    for candidate in (os.environ.get("REAPER_PG_BIN"), str(DEFAULT_BIN)):
        if candidate and (Path(candidate) / "pg_basebackup").exists():
            return Path(candidate)
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        out = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=True
        ).stdout.strip()
        if out and (Path(out) / "pg_basebackup").exists():
            return Path(out)
    return None


def why_unavailable() -> str | None:
    """Why a replica cannot be made here (None: it can)."""
    if pg_bin() is None:
        return "no PostgreSQL server binaries (set REAPER_PG_BIN)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Pair:
    """A running primary and its standby (``standby1`` in pg_stat_replication)."""

    primary: str
    standby: str
    root: Path


class _Runner:
    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.as_postgres = os.geteuid() == 0

    def __call__(self, tool: str, *args: str) -> None:
        cmd = [str(self.bindir / tool), *args]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)


def _conf(datadir: Path, port: int, socket_dir: Path, extra: dict[str, str]) -> None:
    settings = {
        "port": str(port),
        "listen_addresses": "'127.0.0.1'",
        "unix_socket_directories": f"'{socket_dir}'",
        "max_wal_senders": "4",
        "wal_keep_size": "'2GB'",
        # The standby tells its replay position every second, not every 10 s.
        "wal_receiver_status_interval": "'1s'",
        **extra,
    }
    with (datadir / "postgresql.conf").open("a") as fh:
        for k, v in settings.items():
            fh.write(f"{k} = {v}\n")


@contextlib.contextmanager
def primary_and_standby(*, slot: str | None = None, **settings: str) -> Iterator[Pair]:
    """Start a primary and a streaming standby of it; stop both and remove them afterwards.

    Args:
        slot: stream through a physical replication slot of this name, created by the base
            backup (None: no slot).
        settings: extra postgresql.conf lines for both (e.g. ``fsync="off"``).

    Raises:
        RuntimeError: no binaries (see :func:`why_unavailable`), or a server did not start.
    """
    reason = why_unavailable()
    if reason:
        raise RuntimeError(reason)
    bindir = pg_bin()
    assert bindir is not None
    run = _Runner(bindir)
    root = Path(tempfile.mkdtemp(prefix="reaper-pacing-replica-"))
    primary, standby = root / "primary", root / "standby"
    if run.as_postgres:
        shutil.chown(root, "postgres", "postgres")
    os.chmod(root, 0o700)
    started: list[Path] = []
    try:
        p_port, s_port = free_port(), free_port()
        run("initdb", "-D", str(primary), "-A", "trust", "-U", "postgres", "--no-sync")
        _conf(primary, p_port, root, settings)
        run("pg_ctl", "-D", str(primary), "-l", str(root / "primary.log"), "-w", "start")
        started.append(primary)
        run(
            "pg_basebackup",
            "-D",
            str(standby),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            *(("-C", "-S", slot) if slot else ()),
            "-d",
            f"host=127.0.0.1 port={p_port} user=postgres application_name={STANDBY_NAME}",
        )
        _conf(standby, s_port, root, settings)
        run("pg_ctl", "-D", str(standby), "-l", str(root / "standby.log"), "-w", "start")
        started.append(standby)
        pair = Pair(
            f"host=127.0.0.1 port={p_port} user=postgres dbname=postgres",
            f"host=127.0.0.1 port={s_port} user=postgres dbname=postgres",
            root,
        )
        wait_streaming(pair.primary)
        yield pair
    finally:
        for datadir in reversed(started):
            with contextlib.suppress(Exception):
                run("pg_ctl", "-D", str(datadir), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def wait_streaming(primary: str, timeout: float = 60.0) -> None:
    """Wait until the standby streams, has replayed everything the primary wrote, and shows
    no lag: ``replay_lag`` keeps its last measurement (that of the seeding's last record) for
    a moment after the standby caught up, and a pacer reading it then would pause at once."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(primary, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT state = 'streaming' AND replay_lsn >= pg_current_wal_lsn() "
                "AND coalesce(replay_lag, interval '0') < interval '20ms' "
                "FROM pg_stat_replication WHERE application_name = %s",
                (STANDBY_NAME,),
            ).fetchone()
            if row and row[0]:
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the standby did not catch up within 60 s")
            time.sleep(0.1)


def set_replay(standby: str, paused: bool) -> None:
    """Pause (``pg_wal_replay_pause()``) or resume the standby's replay."""
    with psycopg.connect(standby, autocommit=True) as conn:
        fn = "pg_wal_replay_pause" if paused else "pg_wal_replay_resume"
        conn.execute(f"SELECT {fn}()")

"""Bad input that only a real process shows: bytes that are not UTF-8 in the environment, odd
config files (a directory, a device, a FIFO, a huge file) refused without hanging, and a port
out of range. Every other bad input: tests/unit/config/test_bad_input.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from reaper.config.load import MAX_CONFIG_BYTES
from tests.support import reaper_executable, run_reaper

# Checked before any connection: the DSN points nowhere (port 1 refuses at once).
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/postgres"


def test_non_utf8_bytes_in_the_environment_from_a_real_process() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REAPER_", "PG"))}
    benv = {k.encode(): v.encode() for k, v in env.items()}
    benv[b"REAPER_NODE_RETENTION"] = b"30\xffd"
    benv[b"REAPER_DSN"] = UNREACHABLE.encode()
    proc = subprocess.run(
        [reaper_executable(), "check"], env=benv, capture_output=True, timeout=30, check=False
    )
    err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert "REAPER_NODE_RETENTION" in err[0] and "UTF-8" in err[0]


def _odd_files(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.toml"
    with huge.open("w") as fh:
        fh.write("# padding\n" * (MAX_CONFIG_BYTES // 10 + 1))
    (tmp_path / "dir.toml").mkdir()
    return {
        "fifo": fifo,
        "huge": huge,
        "directory": tmp_path / "dir.toml",
        "device": Path("/dev/zero"),
        "null": Path("/dev/null"),
    }


@pytest.mark.parametrize("kind", ["fifo", "huge", "directory", "device", "null"])
def test_an_odd_config_file_is_one_line_and_never_hangs(kind: str, tmp_path: Path) -> None:
    path = _odd_files(tmp_path)[kind]
    # A real process: a FIFO that blocked open() would hang it, and the timeout would fail.
    run = run_reaper("check", "--config", str(path), env={"REAPER_DSN": UNREACHABLE}, timeout=20)
    assert run.code == 2, run.stderr
    assert len(run.stderr_lines) == 1, run.stderr
    assert str(path) in run.stderr_lines[0] or "--config" in run.stderr_lines[0]


def test_a_port_out_of_range_says_so_and_a_flag_needs_no_quotes() -> None:
    run = run_reaper("run", "--listen", "127.0.0.1:99999")
    assert run.code == 2
    (line,) = run.stderr.strip().splitlines()
    assert "port 99999 is out of range (0 to 65535)" in line and "in quotes" not in line


@pytest.mark.parametrize(
    ("args", "env", "toml", "words"),
    [
        (["--schedule", "0 3 * * 8"], {}, "", ["--schedule", "not a day of the week"]),
        ([], {"REAPER_WINDOW": "01:00-01:00"}, "", ["REAPER_WINDOW", "empty window"]),
        ([], {}, 'schedule_time_zone = "CET+1"\n', ["schedule_time_zone", "IANA"]),
        (
            [],
            {},
            '[sweeps.router_leases]\nschedule = "0 0 30 2 *"\n',
            ["[sweeps.router_leases]", "never fires"],
        ),
        ([], {}, 'schedule = "0 3 * * *"\ninterval = "1h"\n', ["interval", "schedule"]),
    ],
    ids=["flag", "variable", "zone", "sweep", "both"],
)
def test_a_bad_schedule_window_or_zone_stops_reaper_run_in_one_line(
    args: list[str], env: dict[str, str], toml: str, words: list[str], tmp_path: Path
) -> None:
    config = tmp_path / "reaper.toml"
    config.write_text(toml)
    run = run_reaper(
        "run", "--config", str(config), *args, env={"REAPER_DSN": UNREACHABLE, **env}, timeout=30
    )
    assert run.code == 2, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("reaper: ")
    for w in words:
        assert w in line, line

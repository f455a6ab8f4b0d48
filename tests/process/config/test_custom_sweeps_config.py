"""Custom sweeps in the config file: what is accepted, and every rejection as an operator sees
it through the real CLI (one line on stderr, exit code 2, before any database work).

The DSN points at a port where nothing listens: a test that got past validation would fail
to connect and exit 1, never 2.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.custom_sweeps_config import NOWHERE, SQL_TEXT, legacy


def test_the_installed_command_exits_2_with_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "reaper.toml"
    path.write_text(legacy("updated_at < %(cutoff)s; DROP TABLE token"))
    proc = subprocess.run(
        [sys.executable, "-m", "reaper", "run-once", "--config", str(path), "--dsn", NOWHERE],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert SQL_TEXT in proc.stderr

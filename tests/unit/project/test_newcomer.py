"""The newcomer's path: the commands `make demo` prints next, and the README shows, work as
printed, against the server `make demo-server` keeps up."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from reaper.dev import demo
from tests.support.newcomer import ROOT, printed_commands


def test_make_demo_ends_with_the_readmes_next_commands(tmp_path: Path) -> None:
    env_file = tmp_path / "reaper.env"
    text = demo.next_steps(env_file, serving=False)
    assert "make demo-server" in text
    assert re.search(r"^demo-server:", (ROOT / "Makefile").read_text(), re.M)
    readme = (ROOT / "README.md").read_text()
    if Path(sys.executable).parent == ROOT / ".venv" / "bin":
        for command in printed_commands(text)[2:]:  # after make demo-server and source FILE
            assert command in readme, command


# A database without the tables: one line that names the database reaper reached.


# Typos get a suggestion; an option on the wrong side of the command says where it goes.

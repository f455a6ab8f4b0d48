"""The docs stay true: every command and every flag that `--help` shows is documented in the
README or a page of the docs site."""

from __future__ import annotations

from pathlib import Path

import click

from reaper.cli import cli

ROOT = Path(__file__).resolve().parent.parent
# The README and the docs site's pages (docs/*.md) together document the commands and flags.
README = "\n".join(
    p.read_text("utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
)


def commands(group: click.Group, prefix: str = "reaper") -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = [(prefix, group)]
    for name, cmd in group.commands.items():
        path = f"{prefix} {name}"
        if isinstance(cmd, click.Group):
            out += commands(cmd, path)
        else:
            out.append((path, cmd))
    return out


def test_every_command_is_documented() -> None:
    missing = [path for path, _ in commands(cli) if f"`{path}" not in README]
    assert not missing, f"README names no {missing}"


def test_every_flag_is_documented() -> None:
    missing = sorted(
        {
            f"{path}: {opt}"
            for path, cmd in commands(cli)
            for param in cmd.params
            if isinstance(param, click.Option)
            for opt in param.opts
            if opt.startswith("--") and opt not in ("--help", "--version") and opt not in README
        }
    )
    assert not missing, f"README does not mention {missing}"

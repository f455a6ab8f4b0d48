"""Helpers that the test_newcomer.py files of several layers share."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def printed_commands(text: str) -> list[str]:
    """The indented command lines of :func:`reaper.dev.demo.next_steps`' text, comments cut."""
    return [
        line.split("  #")[0].strip()
        for line in text.splitlines()
        if line.startswith("  ") and not line.startswith("   ")
    ]

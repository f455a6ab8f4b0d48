"""Every kind of error or refusal reaper can log (each class of reaper/errors.py, the
``error_type`` of a log line) has a runbook entry that says what it means and what to do, and
the alerts about failing or refused runs lead to those entries."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reaper import errors

ROOT = Path(__file__).resolve().parents[3]
OPS = ROOT / "docs" / "operations"
PAGE = OPS / "errors.md"


def error_classes() -> list[type[BaseException]]:
    """Every exception class that reaper/errors.py defines."""
    return [
        c
        for c in vars(errors).values()
        if isinstance(c, type) and issubclass(c, BaseException) and c.__module__ == errors.__name__
    ]


def entries() -> dict[str, str]:
    """The page's entries: heading (a class name) -> its text up to the next heading."""
    parts = re.split(r"^### (\w+)\n", PAGE.read_text(), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_classes_are_found() -> None:
    names = {c.__name__ for c in error_classes()}
    assert {"FullTableRefused", "BatchStalled", "ClockSkewRefused", "TableProblem"} <= names


@pytest.mark.parametrize("cls", error_classes(), ids=lambda c: c.__name__)
def test_every_error_class_has_a_runbook_entry(cls: type[BaseException]) -> None:
    entry = entries().get(cls.__name__)
    assert entry is not None, f"docs/operations/errors.md has no entry for {cls.__name__}"
    assert "**Means.**" in entry and "**Do.**" in entry, cls.__name__


def test_every_entry_names_a_class_that_exists() -> None:
    assert set(entries()) <= {c.__name__ for c in error_classes()}


def test_refusals_are_entered_as_refusals() -> None:
    """A refusal (a subclass of errors.Refusal: its runs count as outcome="refused") sits
    under "Refusals", which ReaperSweepRefused's page links to; no other class does."""
    text = PAGE.read_text()
    refusals = text[text.index("## Refusals") : text.index("## Failures")]
    kinds = [
        c for c in error_classes() if issubclass(c, errors.Refusal) and c is not errors.Refusal
    ]
    assert {c.__name__ for c in kinds} >= {"FullTableRefused", "ClockSkewRefused"}
    for cls in error_classes():
        entered = f"### {cls.__name__}\n" in refusals
        assert entered == (cls in kinds), cls.__name__


@pytest.mark.parametrize(
    ("alert", "section"),
    [("ReaperSweepFailing", "## Failures"), ("ReaperSweepRefused", "## Refusals")],
)
def test_the_alerts_runbooks_link_each_entry_of_their_kind(alert: str, section: str) -> None:
    """The alert's runbook page links the entry of each kind its runs can end with."""
    text = PAGE.read_text()
    start = text.index(section)
    end = text.index("\n## ", start + 1)
    kinds = re.findall(r"^### (\w+)\n", text[start:end], flags=re.M)
    runbook = (OPS / f"{alert}.md").read_text()
    common = {"StatementCanceled", "DatabaseError", "ForeignKeyConflict", "WriteInRead"}
    for kind in kinds:
        if kind in common:
            continue  # named through the entries that cover them
        assert f"(errors.md#{kind.lower()})" in runbook, (alert, kind)

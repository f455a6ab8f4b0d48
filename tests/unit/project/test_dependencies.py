"""Every dependency admits no release with a known advisory, and none newer than the series the
tests ran: a floor at or past each advisory's fix, and an upper bound on each requirement."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"

# The first release past each known advisory, and the advisory.
FIXED = {
    "h11": ("0.16.0", "CVE-2025-43859: request smuggling through chunked bodies"),
    "setuptools": ("78.1.1", "CVE-2025-47273: path traversal in PackageIndex"),
    "pytest": ("9.0.3", "CVE-2025-71176: /tmp/pytest-of-{user} taken by another user"),
    "pyyaml": ("5.4", "CVE-2020-14343: code execution by full_load"),
    "mkdocs": ("1.2.3", "GHSA-qh9q-34h6-hcv9: the dev server's path traversal"),
    "mkdocs-material": ("9.7.7", "CVE-2026-73295: XSS through search.suggest"),
}


def requirements() -> list[str]:
    doc = tomllib.loads(PYPROJECT.read_text("utf-8"))
    project = doc["project"]
    return [
        *doc["build-system"]["requires"],
        *project["dependencies"],
        *(r for group in project["optional-dependencies"].values() for r in group),
    ]


def floor(req: Requirement) -> Version | None:
    found = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    return max(found) if found else None


def _cases() -> list[object]:
    out: list[object] = []
    for text in requirements():
        out.append(pytest.param(text, id=text))
    return out


@pytest.mark.parametrize("text", _cases())
def test_a_floor_past_every_advisory(text: str) -> None:
    req = Requirement(text)
    least = floor(req)
    assert least is not None, f"{text}: give a floor"
    fixed = FIXED.get(req.name.lower())
    if fixed is not None:
        assert least >= Version(fixed[0]), f"{text} admits {req.name} < {fixed[0]} ({fixed[1]})"


@pytest.mark.parametrize("text", _cases())
def test_an_upper_bound_on_every_requirement(text: str) -> None:
    req = Requirement(text)
    # The build backend is chosen by the builder, newest first: its floor is what matters.
    if req.name == "setuptools":
        return
    assert any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier), (
        f"{text}: bound it by the series the tests ran"
    )

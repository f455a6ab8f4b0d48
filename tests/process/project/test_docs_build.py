"""``make docs`` fails on every broken link or anchor: its own command, run on a copy of the
site with one broken link of each kind, exits non-zero and names it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def docs_command() -> list[str]:
    """The command of the Makefile's ``docs`` target, with ``$(BIN)`` this interpreter's bin."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^docs:.*\n\t(.+)$", makefile, re.M)
    assert recipe, "the Makefile has no docs target"
    bin_dir = str(Path(sys.executable).parent)
    words = shlex.split(recipe.group(1).replace("$(BIN)", bin_dir))
    return [w for w in words if not re.fullmatch(r"[A-Z_0-9]+=.*", w)]


def test_the_docs_target_never_hides_warnings() -> None:
    """--quiet hides the warnings that --strict counts (mkdocs counts them through the same
    logger it silences): the target must not pass it."""
    cmd = docs_command()
    assert "--strict" in cmd
    assert not {"-q", "--quiet"} & set(cmd)


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site-src"
    site.mkdir()
    shutil.copytree(ROOT / "docs", site / "docs")
    for name in ("mkdocs.yml", "CHANGELOG.md"):
        shutil.copy(ROOT / name, site / name)
    return site


def _build(site: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run(
        [*docs_command(), "--site-dir", str(site / "out")],
        cwd=site,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("page", "link", "named"),
    [
        ("index.md", "[x](engine.md#no-such-anchor)", "no-such-anchor"),
        ("index.md", "[x](no-such-page.md)", "no-such-page.md"),
        ("operations/index.md", "[x](../safety.md#nowhere)", "nowhere"),
        ("CHANGELOG.md", "[x](docs/engine.md#gone)", "gone"),
    ],
)
def test_a_broken_link_or_anchor_fails_the_build(
    tmp_path: Path, page: str, link: str, named: str
) -> None:
    site = _site(tmp_path)
    target = site / page if page == "CHANGELOG.md" else site / "docs" / page
    target.write_text(target.read_text() + f"\n{link}\n")
    done = _build(site)
    assert done.returncode != 0, done.stderr[-2000:]
    assert named in done.stderr


def test_the_docs_build_as_they_are(tmp_path: Path) -> None:
    done = _build(_site(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "WARNING" not in done.stderr

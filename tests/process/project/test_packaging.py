"""The SQL ships inside the wheel: build it, install it into a fresh virtual environment, and
load every statement from the installed package, from a directory outside the source tree;
then run the installed ``reaper`` command there, against a throwaway database. The SQL lives
in the source tree's top-level ``sql/`` and is installed as ``reaper/sql/``: a wheel without
it fails.

The wheel is built with ``python -m build --wheel`` from a copy of the source tree (so the
worktree gains no build/ or .egg-info), and installed with ``--no-deps --no-index`` (no network,
no dependency resolution); its dependencies are borrowed from the test's own environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import BUILTIN_SWEEPS

SOURCE = Path(__file__).resolve().parents[3]
SOURCE_SQL = SOURCE / "sql"

# Runs inside the fresh environment, from a directory with no source tree on sys.path.
PROBE = """
import json, reaper
from reaper import sqltext
try:
    names = sqltext.all_files()
    texts = {n: sqltext.read(n) for n in names}
    from reaper.config.settings import build_settings
    from reaper.config.sweeps import configured_sweeps
    predicates = {s.name: s.predicate.where.as_string(None)
                  for s in configured_sweeps(build_settings({}))
                  if s.builtin}
    error = None
except Exception as exc:
    names, texts, predicates, error = [], {}, {}, repr(exc)
print(json.dumps({"package": reaper.__file__, "names": names, "texts": texts,
                  "predicates": predicates, "error": error}))
"""


def source_sql() -> dict[str, str]:
    return {
        p.relative_to(SOURCE_SQL).as_posix(): p.read_text("utf-8")
        for p in sorted(SOURCE_SQL.rglob("*.sql"))
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(SOURCE / name, src / name)
    for folder in ("reaper", "sql"):
        shutil.copytree(
            SOURCE / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    out = tmp / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(src)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (built,) = out.glob("reaper-*.whl")
    yield built


def install(wheel: Path, where: Path) -> Path:
    """Install ``wheel`` alone into a fresh venv under ``where``; the venv's python."""
    env_dir = where / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    # reaper's dependencies (pglast, psycopg, ...) come from this environment's site-packages,
    # listed after the fresh one's: `import reaper` still finds the installed wheel first, and
    # .pth files there (this checkout's editable install) are not processed.
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (purelib / "outer-deps.pth").write_text(
        "\n".join(sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}))
        + "\n"
    )
    return python


def install_and_probe(wheel: Path, where: Path) -> dict[str, object]:
    """Install ``wheel`` alone into a fresh venv under ``where``; what the probe saw there."""
    python = install(wheel, where)
    proc = subprocess.run(
        [str(python), "-I", "-c", PROBE],
        cwd=where,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_the_wheel_ships_every_sql_file(wheel: Path, tmp_path: Path) -> None:
    seen = install_and_probe(wheel, tmp_path)
    assert seen["error"] is None
    # Loaded from the environment, not from the source tree.
    assert str(seen["package"]).startswith(str(tmp_path / "venv"))
    expected = source_sql()
    assert seen["names"] == sorted(expected)
    assert seen["texts"] == expected
    assert {"schema.sql", "indexes.sql", "engine/index_batch.sql", "engine/heap_batch.sql"} <= set(
        expected
    )
    predicates = seen["predicates"]
    assert isinstance(predicates, dict) and len(predicates) == len(BUILTIN_SWEEPS)
    assert all(p.strip() for p in predicates.values())


def test_a_wheel_without_sql_is_caught(wheel: Path, tmp_path: Path) -> None:
    """The same check on a copy of the wheel with reaper/sql/ left out: it must fail."""
    stripped = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(stripped, "w") as zout:
        for item in zin.infolist():
            if not item.filename.startswith("reaper/sql/"):
                zout.writestr(item, zin.read(item.filename))
    seen = install_and_probe(stripped, tmp_path)
    assert seen["names"] != sorted(source_sql())
    assert seen["error"] is not None or seen["names"] == []


def test_the_wheel_ships_every_module(wheel: Path) -> None:
    """pyproject.toml lists reaper's packages by name (the SQL folder is mapped into one): a
    package missing from that list would be missing from the wheel."""
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist() if n.endswith(".py")}
    source = {p.relative_to(SOURCE).as_posix() for p in (SOURCE / "reaper").rglob("*.py")} | {
        "reaper/sql/__init__.py"
    }
    assert source - shipped == set()


def test_the_installed_command_finds_its_sql_from_another_directory(
    wheel: Path, tmp_path: Path, dsn: str
) -> None:
    """``reaper --help`` and a dry run (which reads the sweeps' predicates and the engine's
    statements) from the installed wheel, in a directory with no source tree."""
    python = install(wheel, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    reaper = python.parent / "reaper"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REAPER_", "PYTHON"))}
    help_ = subprocess.run(
        [str(reaper), "--help"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert help_.returncode == 0, help_.stderr
    assert "run-once" in help_.stdout
    where = subprocess.run(
        [str(python), "-c", "import reaper.sql; print(reaper.sql.__file__)"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert Path(where).is_relative_to(tmp_path / "venv"), where
    run = subprocess.run(
        [str(reaper), "run-once", "--dry-run", "--json", "--dsn", dsn],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout)
    assert {r["sweep"] for r in results} >= {"nodes_silent", "bootstrap_tokens"}
    assert all(r["outcome"] == "success" and r["dry_run"] for r in results), results

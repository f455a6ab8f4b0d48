"""The SQL ships inside the wheel: build it, install it into a fresh virtual environment, and
load every statement from the installed package. A wheel without ``reaper/sql/`` fails.

The wheel is built with ``python -m build --wheel`` from a copy of the source tree (so the
worktree gains no build/ or .egg-info), and installed with ``--no-deps --no-index`` (no network,
no dependency resolution); its dependencies are borrowed from the test's own environment.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent
SOURCE_SQL = SOURCE / "reaper" / "sql"

# Runs inside the fresh environment, from a directory with no source tree on sys.path.
PROBE = """
import json, reaper
from reaper import sqlfiles
try:
    names = sqlfiles.all_files()
    texts = {n: sqlfiles.read(n) for n in names}
    from reaper.sweeps import BUILTIN_SWEEPS
    predicates = {s.name: s.predicate for s in BUILTIN_SWEEPS}
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
    shutil.copytree(
        SOURCE / "reaper", src / "reaper", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    out = tmp / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(src)],
        capture_output=True, text=True, check=False, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (built,) = out.glob("reaper-*.whl")
    yield built


def install_and_probe(wheel: Path, where: Path) -> dict[str, object]:
    """Install ``wheel`` alone into a fresh venv under ``where``; what the probe saw there."""
    env_dir = where / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-index", str(wheel)],
        check=True, capture_output=True, timeout=120,
    )
    # reaper's dependencies (pglast, psycopg, ...) come from this environment's site-packages,
    # listed after the fresh one's: `import reaper` still finds the installed wheel first, and
    # .pth files there (this checkout's editable install) are not processed.
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )
    (purelib / "outer-deps.pth").write_text(
        "\n".join(sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}))
        + "\n"
    )
    proc = subprocess.run(
        [str(python), "-I", "-c", PROBE], cwd=where, capture_output=True, text=True,
        check=True, timeout=60,
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
    assert isinstance(predicates, dict) and len(predicates) == 6
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

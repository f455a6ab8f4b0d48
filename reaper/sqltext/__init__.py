"""The SQL that reaper ships, read once from the installed package.

The files live in the source tree's top-level ``sql/`` folder, which setuptools maps into the
package as ``reaper.sql`` (installed as ``reaper/sql/``; an editable install maps the folder
itself). One statement (or, under ``sweeps/``, one predicate) per file. Reading them through
:mod:`importlib.resources` means a wheel that forgot the SQL fails loudly, at import.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path

_COMMENT = re.compile(r"^\s*--.*$", re.MULTILINE)


def _root() -> resources.abc.Traversable:
    """The ``reaper.sql`` package's folder (``sql/`` of the source tree, ``reaper/sql/``
    installed)."""
    return resources.files("reaper.sql")


@functools.cache
def read(name: str) -> str:
    """The text of SQL file ``<name>`` (e.g. ``schema.sql``, ``engine/heap_batch.sql``).

    Raises:
        FileNotFoundError: the package was installed without that file.
    """
    return _root().joinpath(*name.split("/")).read_text("utf-8")


@functools.cache
def where(name: str) -> str:
    """Where SQL file ``<name>`` is on this machine, for a message that sends the reader
    to it (``grants.sql``): its absolute path (``sql/`` of the source tree in a checkout,
    ``reaper/sql/`` of the installed package), else ``reaper/sql/<name>`` when the package
    is not a folder on disk (a zip)."""
    path = _root().joinpath(*name.split("/"))
    if isinstance(path, Path) and path.is_file():
        return str(path)
    return f"reaper/sql/{name}"


def strip_comments(text: str) -> str:
    """``text`` without ``--`` line comments and surrounding blank space."""
    return _COMMENT.sub("", text).strip()


@functools.cache
def predicate(sweep: str) -> str:
    """The predicate of a built-in sweep (``sql/sweeps/<sweep>.sql``), comments removed.
    ``{schema}`` in it stands for the schema of the built-in sweeps' tables
    (:func:`reaper.sqltext.declared.reviewed` fills it in)."""
    return strip_comments(read(f"sweeps/{sweep}.sql"))


@functools.cache
def since(sweep: str) -> str:
    """The "since" expression of a built-in sweep (``sql/since/<sweep>.sql``), comments
    removed: the moment a row's retention started, for reaper_backlog_oldest_seconds."""
    return strip_comments(read(f"since/{sweep}.sql"))


@functools.cache
def engine(name: str) -> str:
    """An engine statement template (``sql/engine/<name>.sql``), comments removed."""
    return strip_comments(read(f"engine/{name}.sql"))


def statements(name: str) -> list[str]:
    """The statements of a script such as ``indexes.sql``, split on ``;`` at line ends, except
    inside a dollar-quoted body (``DO $$ ... $$``), whose own statements end in ``;`` too."""
    body = strip_comments(read(name))
    out: list[str] = []
    current: list[str] = []
    quoted = False
    for line in body.splitlines():
        current.append(line)
        quoted ^= line.count("$$") % 2 == 1
        if not quoted and re.search(r";\s*$", line):
            out.append("\n".join(current).strip().removesuffix(";").strip())
            current = []
    out.append("\n".join(current).strip())
    return [s for s in out if s]


# How a script that a person runs (grants.sql, schema.sql, indexes.sql) opens and closes:
# one transaction whose search_path is PostgreSQL's own catalog alone, so that no function,
# operator or type another role created (in public, or in a schema of the caller's path)
# runs with the rights of the owner or superuser who runs it.
PINNED_OPENING = ("BEGIN", "SET LOCAL search_path = pg_catalog, pg_temp")
PINNED_CLOSING = "COMMIT"


def body(name: str) -> list[str]:
    """The statements of a script such as ``indexes.sql`` without its opening BEGIN and
    search_path pin and its closing COMMIT (:data:`PINNED_OPENING`): what reaper runs itself,
    in a session it pinned already.

    Raises:
        ValueError: the script does not open and close so.
    """
    out = statements(name)
    n = len(PINNED_OPENING)
    if tuple(out[:n]) != PINNED_OPENING or out[-1:] != [PINNED_CLOSING]:
        raise ValueError(
            f"{name} does not open with {'; '.join(PINNED_OPENING)} and end with COMMIT"
        )
    return out[n:-1]


def all_files() -> list[str]:
    """Every ``.sql`` file shipped in the package, as names :func:`read` accepts."""
    root = _root()
    out: list[str] = []

    def walk(node: resources.abc.Traversable, prefix: str) -> None:
        for child in node.iterdir():
            if child.is_dir():
                walk(child, f"{prefix}{child.name}/")
            elif child.name.endswith(".sql"):
                out.append(prefix + child.name)

    walk(root, "")
    return sorted(out)


@functools.cache
def ops(name: str) -> str:
    """An operator-tool statement (``sql/ops/<name>.sql``), comments removed."""
    return strip_comments(read(f"ops/{name}.sql"))

"""What a sweep keeps of the rows it deletes, outside the database: the keys of each batch
(one ``batch_keys`` debug line, capped in size) and the rows as JSON lines, to a file or
standard output, written before the batch commits.

An archive table needs nothing here: the batch's own statement inserts the rows it deletes
(``sql/engine/trail_archive.sql``), so a row is never deleted without being archived.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from reaper import errors
from reaper.db import BatchRows
from reaper.sqltext.names import TableName

# The most a batch_keys line holds of keys, as JSON text: beyond it the line counts the keys
# it leaves out (keys_omitted). Log pipelines split or drop longer lines (Docker's json-file
# driver splits at 16 KiB); an archive keeps every row.
MAX_KEYS_CHARS = 8192
# Standard output's name as an archive_file.
STDOUT = "-"

# One lock per target: the daemon's sweeps run in parallel, and a batch's lines go out whole.
_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


def capped_keys(keys: Sequence[Sequence[Any]]) -> tuple[list[Any], int]:
    """``(shown, omitted)``: the first keys whose JSON text fits in MAX_KEYS_CHARS, a key of
    one column as its value and one of several as a list, and how many were left out."""
    shown: list[Any] = []
    size = 0
    for key in keys:
        value = key[0] if len(key) == 1 else list(key)
        size += len(json.dumps(value, default=str)) + 2
        if size > MAX_KEYS_CHARS:
            break
        shown.append(value)
    return shown, len(keys) - len(shown)


def _lock(target: str) -> threading.Lock:
    with _locks_lock:
        return _locks.setdefault(target, threading.Lock())


class LineArchive:
    """Writes each batch's deleted rows as JSON lines to ``target`` (an absolute path, or
    ``-`` for standard output), before the batch commits (called as a batch's
    ``before_commit``): a row is never deleted without its line written (and, to a file,
    flushed to disk by fsync). A batch whose COMMIT then fails leaves its lines behind for
    rows still in the table, which a later batch deletes and writes again: a reader counts
    a row once by its key.

    One line per row: ``{"sweep": ..., "table": "schema.name", "written_at": ISO 8601 UTC,
    "row": {column: value, ...}}``, the row as PostgreSQL's ``row_to_json`` renders it.

    Raises (when called):
        ArchiveFailed: the lines could not be written (the batch rolls back).
    """

    def __init__(self, target: str, sweep: str, table: TableName) -> None:
        self.target = target
        self._head = (
            f'{{"sweep": {json.dumps(sweep)}, "table": {json.dumps(table.qualified)}, '
            '"written_at": '
        )

    def __call__(self, rows: BatchRows) -> None:
        if not rows.lines:
            return
        at = json.dumps(datetime.now(UTC).isoformat())
        text = "".join(f'{self._head}{at}, "row": {line}}}\n' for line in rows.lines)
        with _lock(self.target):
            try:
                if self.target == STDOUT:
                    sys.stdout.write(text)
                    sys.stdout.flush()
                else:
                    self._append(text.encode("utf-8"))
            except OSError as exc:
                raise errors.ArchiveFailed(
                    f"archive file {self.target}: {exc.strerror or exc}; the batch was rolled "
                    "back, nothing of it deleted"
                ) from None

    def _append(self, data: bytes) -> None:
        fd = os.open(self.target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

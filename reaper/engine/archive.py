"""What a sweep keeps of the rows it deletes, outside the database: the keys of each batch
(one ``batch_keys`` debug line, capped in size) and the rows as JSON lines, to a file or
standard output, written before the batch commits.

An archive table needs nothing here: the batch's own statement inserts the rows it deletes
(``sql/engine/trail_archive.sql``), so a row is never deleted without being archived.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import structlog

from reaper import errors
from reaper.db import BatchRows
from reaper.log import bounded
from reaper.sqltext.names import TableName

# The most a batch_keys line holds of keys, as JSON text: beyond it the line counts the keys
# it leaves out (keys_omitted). Log pipelines split or drop longer lines (Docker's json-file
# driver splits at 16 KiB); an archive keeps every row.
MAX_KEYS_CHARS = 8192
log = structlog.get_logger("reaper.runner")

# Standard output's name as an archive_file.
STDOUT = "-"

# One lock per target: the daemon's sweeps run in parallel, and a batch's lines go out whole.
_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


def capped_keys(keys: Sequence[Sequence[Any]]) -> tuple[list[Any], int]:
    """``(shown, omitted)``: the first keys whose JSON text fits in MAX_KEYS_CHARS, a key of
    one column as its value and one of several as a list, and how many were left out. A key
    is shown as a log line holds any value (:func:`reaper.log.bounded`): a jsonb value nested
    thousands deep is cut, never raised on."""
    shown: list[Any] = []
    size = 0
    for key in keys:
        value = bounded(key[0] if len(key) == 1 else list(key))
        size += len(json.dumps(value, default=str)) + 2
        if size > MAX_KEYS_CHARS:
            break
        shown.append(value)
    return shown, len(keys) - len(shown)


def _lock(target: str) -> threading.Lock:
    with _locks_lock:
        return _locks.setdefault(target, threading.Lock())


class _Refused(Exception):
    """An archive file reaper will not write to; the message says why and what to do."""


# How an archive file is opened: appended to (and read: its last line), created owner-only if
# missing, never through a symbolic link in its last component (O_NOFOLLOW), never waiting
# (O_NONBLOCK: a FIFO opened read-write never waits anyway), never as a controlling terminal.
_OPEN_FLAGS = (
    os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
) | getattr(os, "O_CLOEXEC", 0)
# How each directory on the way is opened: not followed if it is a link; O_PATH needs no
# read permission on it (Linux).
_DIR_FLAGS = os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_PATH", os.O_RDONLY)
# Mode of a file reaper creates: its owner's alone (the rows are the deleted data).
FILE_MODE = 0o600
# How much of a file's end is read at a time to find its last whole line.
_TAIL_CHUNK_BYTES = 64 * 1024


class LineArchive:
    """Writes each batch's deleted rows as JSON lines to ``target`` (an absolute path, or
    ``-`` for standard output), before the batch commits (called as a batch's
    ``before_commit``): a row is never deleted without its line written (and, to a file,
    flushed to disk by fsync). A batch whose COMMIT then fails leaves its lines behind for
    rows still in the table, which a later batch deletes and writes again: a reader counts
    a row once by its key.

    One line per row: ``{"sweep": ..., "table": "schema.name", "written_at": ISO 8601 UTC,
    "row": {column: value, ...}}``, the row as PostgreSQL's ``row_to_json`` renders it.

    The file is reaper's own: created owner-only (0600) where it is missing, and written only
    when it is a regular file of reaper's user, with one link, that no one else may read or
    write, reached through no symbolic link (each directory of the path is opened without
    following one). A FIFO, a device, a link or someone else's file is refused before a byte
    is written, and opening never waits. A batch whose lines cannot all be written (a full
    disk, a file size limit, fsync failing) cuts the file back to where the batch began, so
    the file is as it was; a torn last line found there (a process killed mid-write) is cut
    off before the next batch appends, and logged.

    Raises (when called):
        ArchiveFailed: the lines could not be written, or the file is refused (the batch
            rolls back).
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
            except _Refused as exc:
                raise errors.ArchiveFailed(
                    f"archive file {self.target}: {exc}; the batch was rolled back, nothing "
                    "of it deleted"
                ) from None
            except OSError as exc:
                raise errors.ArchiveFailed(
                    f"archive file {self.target}: {exc.strerror or exc}; the batch was rolled "
                    "back, nothing of it deleted"
                ) from None

    def _append(self, data: bytes) -> None:
        fd = self._open()
        try:
            start = self._whole_lines(fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError:
                # The file as it was before the batch: no line of rows that stay.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
                    os.fsync(fd)
                raise
        finally:
            os.close(fd)

    def _open(self) -> int:
        """The target opened for appending, after every check of the class's docstring.

        Raises:
            _Refused: a file reaper will not write to.
            OSError: the path cannot be opened (a missing directory, no permission).
        """
        parts = [p for p in self.target.split("/") if p not in ("", ".")]
        if not parts:
            raise _Refused("not a file; name a file (e.g. /var/lib/reaper/archive.jsonl)")
        folder = os.open("/", _DIR_FLAGS)
        try:
            for i, name in enumerate(parts[:-1]):
                try:
                    step = os.open(name, _DIR_FLAGS, dir_fd=folder)
                except OSError as exc:
                    here = "/" + "/".join(parts[: i + 1])
                    if exc.errno in (errno.ENOTDIR, errno.ELOOP) and os.path.islink(here):
                        raise _Refused(
                            f"{here} is a symbolic link; name the file by its real path "
                            f"({os.path.realpath(self.target)})"
                        ) from None
                    raise
                os.close(folder)
                folder = step
            try:
                fd = os.open(parts[-1], _OPEN_FLAGS, FILE_MODE, dir_fd=folder)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise _Refused(
                        "a symbolic link; reaper writes only to a file of its own: name the "
                        "file itself"
                    ) from None
                if exc.errno == errno.ENXIO:
                    raise _Refused("not a regular file (a FIFO); name a regular file") from None
                raise
        finally:
            os.close(folder)
        try:
            _check_own(os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _whole_lines(self, fd: int) -> int:
        """The file's size, after cutting off a torn last line (one without its newline),
        which a process stopped mid-write leaves: the next line would be fused onto it."""
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return size
        end = size
        while end > 0:
            begin = max(0, end - _TAIL_CHUNK_BYTES)
            found = os.pread(fd, end - begin, begin).rfind(b"\n")
            if found >= 0:
                end = begin + found + 1
                break
            end = begin
        os.ftruncate(fd, end)
        os.fsync(fd)
        log.warning(
            "archive_torn_line_removed",
            archive_file=self.target,
            bytes=size - end,
            fix="none needed: the batch it belonged to was never committed",
        )
        return end


def _check_own(st: os.stat_result) -> None:
    """Refuse (raise _Refused) what ``st`` describes unless it is a regular file of this
    process's user, with one link, that no other user may read or write."""
    if not stat.S_ISREG(st.st_mode):
        raise _Refused("not a regular file; name a regular file")
    if st.st_uid != os.geteuid():
        raise _Refused(
            f"owned by uid {st.st_uid}, not by reaper's user (uid {os.geteuid()}); reaper "
            "appends only to a file of its own: name a new file"
        )
    if st.st_nlink != 1:
        raise _Refused(f"has {st.st_nlink} hard links; name a file with one")
    if st.st_mode & 0o077:
        raise _Refused(
            f"mode {stat.S_IMODE(st.st_mode):04o}: others may read or write it; "
            f"chmod {FILE_MODE:o} it"
        )

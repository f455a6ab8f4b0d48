"""The trail outside the database, without one: the cap of a ``batch_keys`` line, and the
JSON lines of an archive file (whole lines, appended; a write that fails is one error that
says the batch was rolled back)."""

from __future__ import annotations

import errno
import json
import os
import resource
import stat
import threading
from pathlib import Path

import pytest
import structlog

from reaper import errors
from reaper.db import BatchRows
from reaper.engine.archive import MAX_KEYS_CHARS, LineArchive, capped_keys
from reaper.sqltext.names import TableName


def test_a_key_of_one_column_is_its_value_and_of_several_a_list() -> None:
    assert capped_keys([(1,), (2,)]) == ([1, 2], 0)
    assert capped_keys([("acme", 1), ("acme", 2)]) == ([["acme", 1], ["acme", 2]], 0)
    assert capped_keys([]) == ([], 0)


@pytest.mark.parametrize("width", [1, 40, 500, MAX_KEYS_CHARS])
def test_keys_past_the_cap_are_counted_not_shown(width: int) -> None:
    keys = [("k" * width + str(i),) for i in range(3000)]
    shown, omitted = capped_keys(keys)
    assert len(json.dumps(shown)) <= MAX_KEYS_CHARS
    assert shown == [k[0] for k in keys[: len(shown)]]
    assert len(shown) + omitted == len(keys) and omitted > 0


def rows(*ids: int) -> BatchRows:
    return BatchRows(
        len(ids),
        len(ids),
        None,
        tuple((i,) for i in ids),
        tuple(json.dumps({"id": i, "note": "a\nb"}) for i in ids),
    )


def test_each_row_is_one_json_line_appended(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    archive = LineArchive(str(path), "events", TableName("audit", "Events"))
    archive(rows(1, 2))
    archive(BatchRows(0, 0))  # a batch that deleted nothing writes nothing
    archive(rows(3))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["row"] for line in lines] == [{"id": i, "note": "a\nb"} for i in (1, 2, 3)]
    assert {(line["sweep"], line["table"]) for line in lines} == {("events", "audit.Events")}


def test_batches_of_parallel_sweeps_are_never_interleaved(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    batch = 200

    def sweep(name: str, first: int) -> None:
        archive = LineArchive(str(path), name, TableName("public", name))
        for n in range(20):
            archive(rows(*range(first + n * batch, first + (n + 1) * batch)))

    threads = [threading.Thread(target=sweep, args=(f"s{i}", i * 100_000)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 4 * 20 * batch
    # Each batch's lines are one run of the file: a sweep's ids come in whole batches.
    for start in range(0, len(lines), batch):
        ids = [line["row"]["id"] for line in lines[start : start + batch]]
        assert ids == list(range(ids[0], ids[0] + batch))


def test_a_line_that_cannot_be_written_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "rows.jsonl"
    with pytest.raises(errors.ArchiveFailed) as failed:
        LineArchive(str(path), "events", TableName("public", "events"))(rows(1))
    assert str(failed.value) == (
        f"archive file {path}: No such file or directory; the batch was rolled back, nothing "
        "of it deleted"
    )


# --- the file is reaper's own --------------------------------------------------------------


def archive_to(path: Path) -> LineArchive:
    return LineArchive(str(path), "events", TableName("public", "events"))


def refusal(path: Path) -> str:
    """The one line of a batch refused at ``path``; asserts nothing was written there."""
    with pytest.raises(errors.ArchiveFailed) as failed:
        archive_to(path)(rows(1, 2))
    message = str(failed.value)
    assert message.startswith(f"archive file {path}: ")
    assert message.endswith("; the batch was rolled back, nothing of it deleted")
    return message


def test_a_new_file_is_created_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    old = os.umask(0)  # whatever the process's umask: the file is created 0600
    try:
        archive_to(path)(rows(1))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_uid == os.geteuid()


def test_a_symbolic_link_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "secret"
    victim.write_text("root's own\n")
    victim.chmod(0o600)
    link = tmp_path / "rows.jsonl"
    link.symlink_to(victim)
    assert "a symbolic link" in refusal(link)
    assert victim.read_text() == "root's own\n"


def test_a_directory_reached_through_a_link_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real)
    message = refusal(tmp_path / "via" / "rows.jsonl")
    assert f"{tmp_path / 'via'} is a symbolic link" in message
    assert str(real / "rows.jsonl") in message  # the path to name instead
    assert list(real.iterdir()) == []


@pytest.mark.parametrize("reader", [True, False], ids=["a reader waits", "no reader"])
def test_a_fifo_is_refused_without_waiting_and_its_reader_gets_nothing(
    tmp_path: Path, reader: bool
) -> None:
    path = tmp_path / "rows.jsonl"
    os.mkfifo(path, 0o600)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK) if reader else None
    try:
        assert "not a regular file" in refusal(path)
        if fd is not None:
            assert os.read(fd, 4096) == b""  # no line reached the reader
    finally:
        if fd is not None:
            os.close(fd)


def test_a_file_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    path = tmp_path / "rows.jsonl"
    path.write_text("")
    path.chmod(0o600)
    os.chown(path, 65534, 65534)
    assert "owned by uid 65534, not by reaper's user" in refusal(path)
    assert path.read_text() == ""


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o660])
def test_a_file_others_may_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("")
    path.chmod(mode)
    assert f"mode {mode:04o}: others may read or write it; chmod 600 it" in refusal(path)
    assert path.read_text() == ""


def test_a_file_with_another_hard_link_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("")
    path.chmod(0o600)
    os.link(path, tmp_path / "other")
    assert "has 2 hard links" in refusal(path)


# --- a failed batch leaves the file as it was -----------------------------------------------


def test_a_batch_past_the_file_size_limit_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    """A full disk, as RLIMIT_FSIZE makes one: the batch's first lines fit, the rest do not."""
    path = tmp_path / "rows.jsonl"
    archive = archive_to(path)
    archive(rows(1, 2))
    before = path.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 150, hard))
    try:
        with pytest.raises(errors.ArchiveFailed) as failed:
            archive(rows(*range(3, 40)))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert "File too large; the batch was rolled back" in str(failed.value)
    assert path.read_bytes() == before
    archive(rows(40))  # the next batch's line starts a line of its own
    assert [json.loads(line)["row"]["id"] for line in path.read_text().splitlines()] == [1, 2, 40]


def test_a_batch_whose_fsync_fails_leaves_no_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rows.jsonl"
    archive = archive_to(path)
    archive(rows(1))
    before = path.read_bytes()
    calls = []

    def failing_fsync(fd: int) -> None:
        calls.append(os.fstat(fd).st_size)
        if len(calls) == 1:  # the batch's own fsync; the one after cutting it back succeeds
            raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(errors.ArchiveFailed, match="Input/output error"):
        archive(rows(2, 3))
    assert calls[0] > len(before)  # the lines were written before fsync failed
    assert path.read_bytes() == before


def test_a_torn_last_line_is_cut_off_before_the_next_batch(tmp_path: Path) -> None:
    """What a process killed mid-write leaves: half a line, never committed."""
    path = tmp_path / "rows.jsonl"
    archive = archive_to(path)
    archive(rows(1, 2))
    whole = path.read_bytes()
    torn = b'{"sweep": "events", "table": "public.events", "writ'
    with path.open("ab") as f:
        f.write(torn)
    with structlog.testing.capture_logs() as logs:
        archive(rows(3))
    assert path.read_bytes().startswith(whole)
    assert [json.loads(line)["row"]["id"] for line in path.read_text().splitlines()] == [1, 2, 3]
    assert [(e["event"], e["bytes"]) for e in logs] == [("archive_torn_line_removed", len(torn))]


def test_a_file_of_one_torn_line_is_emptied_first(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"x" * 200_000)  # longer than one read of its tail
    path.chmod(0o600)
    archive_to(path)(rows(7))
    assert [json.loads(line)["row"]["id"] for line in path.read_text().splitlines()] == [7]

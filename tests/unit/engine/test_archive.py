"""The trail outside the database, without one: the cap of a ``batch_keys`` line, and the
JSON lines of an archive file (whole lines, appended; a write that fails is one error that
says the batch was rolled back)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

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

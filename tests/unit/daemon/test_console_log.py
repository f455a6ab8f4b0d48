"""A console log line is the event and its few key figures, about one line at 80 columns
(the daemon on a terminal logs one per sweep run); a JSON line keeps every field."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from reaper import log

# The daemon's canonical line as the engine logs it, with every field (reaper.engine.run).
FINISHED = dict(
    sweep="enrollment_requests_ephemeral",
    table="enrollment_requests",
    reason="ephemeral",
    stopped_by="done",
    locked_at=1796151656.7014575,
    unlocked_at=1796151656.9368548,
    rows=9969,
    batches=5,
    seconds=0.522,
    cutoffs={"cutoff": "2026-12-01T18:00:56.701630+00:00"},
    strategy="index",
    contended_batches=0,
    timed_out_batches=0,
    skipped={},
    dry_run=False,
)
FAILED = dict(
    sweep="nodes_silent",
    table="nodes",
    reason="silent",
    error="canceling statement due to statement timeout: batch of 20,000 rows of nodes "
    "took longer than statement_timeout 10s; lower batch_size in [sweeps.nodes_silent]",
    error_type="StatementTimeout",
    sqlstate="57014",
    rows=0,
    batches=3,
    seconds=31.2,
    cutoffs={"cutoff": "2026-11-01T19:00:56+00:00"},
    strategy="index",
    contended_batches=0,
    timed_out_batches=1,
    skipped={"locked": 2},
    dry_run=False,
)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


def lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [x for x in capsys.readouterr().err.splitlines() if x.strip()]


def test_a_console_line_fits_80_columns(
    capsys: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    log.configure("info", json=False)
    logger = structlog.get_logger("reaper.runner")
    logger.info("sweep_finished", **FINISHED)
    logger.error("sweep_failed", **FAILED)
    logger.info("sweep_finished", **{**FINISHED, "sweep": "nodes_silent"})
    finished, failed, short = lines(capsys)
    # The longest built-in sweep name still fits two lines; a usual one, one.
    assert len(finished) <= 160 and len(short) <= 80, (finished, short)
    for figure in (
        "sweep_finished enrollment_requests_ephemeral",
        "rows=9969",
        "batches=5",
        "seconds=0.522",
    ):
        assert figure in finished, finished
    for noise in (
        "locked_at",
        "cutoffs",
        "contended_batches",
        "dry_run",
        "2026-12-01T",
        "stopped_by=done",
    ):
        assert noise not in finished, finished
    # A failure: its error first, cut to fit, and what kind it was; at most two lines.
    assert len(failed) <= 160, failed
    assert "sweep_failed nodes_silent" in failed, failed
    assert "error_type=StatementTimeout" in failed, failed
    assert "canceling statement due to statement timeout" in failed


def test_a_bug_keeps_its_traceback_on_the_console(
    capsys: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    log.configure("info", json=False)
    try:
        raise ZeroDivisionError("the bug")
    except ZeroDivisionError as exc:
        structlog.get_logger("reaper.runner").error("sweep_failed", exc_info=exc, **FAILED)
    text = "\n".join(lines(capsys))
    assert "Traceback" in text and "ZeroDivisionError: the bug" in text, text


def test_a_json_line_keeps_every_field(
    capsys: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    log.configure("info", json=True)
    structlog.get_logger("reaper.runner").info("sweep_finished", **FINISHED)
    (line,) = lines(capsys)
    record = json.loads(line)
    assert {k: record[k] for k in FINISHED} == FINISHED

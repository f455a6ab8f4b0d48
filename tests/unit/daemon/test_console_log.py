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


# -- what no rendering shows, and what never fails a line ------------------------------------

PASSWORD = "s3cret-pw-42"
# A name from the database, hostile: ESC, CR, BEL, bidirectional overrides, a newline.
HOSTILE = "idx\x1b[2J\x1b]0;title\x07\rover\u202eesrever\u2066x\u2069\nfake"
ACTIVE = ("\x1b", "\r", "\x07", "\u202e", "\u2066", "\u2069")


def _connect(dsn: str) -> None:
    """A frame whose local variable holds a password, as the pool's do."""
    password = dsn.split(":")[2].split("@")[0]  # noqa: F841 (a local a renderer could show)
    raise ConnectionError("the server closed the connection")


@pytest.mark.parametrize("json_lines", [False, True], ids=["console", "json"])
def test_a_traceback_never_shows_a_frames_locals_or_a_password(
    capsys: pytest.CaptureFixture[str], restore_logging: None, json_lines: bool
) -> None:
    log.configure("debug", json=json_lines)
    logger = structlog.get_logger("reaper.runner")
    try:
        _connect(f"postgresql://reaper:{PASSWORD}@db/control")
    except ConnectionError:
        logger.exception("sweep_failed", sweep="nodes_silent")
    logger.info("connecting", target=f"host=db password={PASSWORD} dbname=control")
    text = capsys.readouterr().err
    assert "Traceback" in text and "the server closed the connection" in text
    assert PASSWORD not in text and "password = " not in text


@pytest.mark.parametrize("json_lines", [False, True], ids=["console", "json"])
def test_a_deep_or_huge_value_is_logged_cut(
    capsys: pytest.CaptureFixture[str], restore_logging: None, json_lines: bool
) -> None:
    log.configure("debug", json=json_lines)
    deep: dict[str, object] = {}
    inner = deep
    for _ in range(5000):
        inner["k"] = {}
        inner = inner["k"]  # type: ignore[assignment]
    logger = structlog.get_logger("reaper.runner")
    logger.debug("batch_keys", keys=[deep], big="x" * 100_000, many=list(range(50_000)))
    (line,) = lines(capsys)
    assert len(line) < 120_000
    if json_lines:
        record = json.loads(line)
        assert json.dumps(record["keys"]).count('"k"') == log.LOG_VALUE_DEPTH - 1
        assert len(record["big"]) == log.LOG_VALUE_CHARS and record["big"].endswith("...")
        assert len(record["many"]) == log.LOG_VALUE_ITEMS + 1
        assert record["many"][-1] == "... 40,000 more"
    else:
        assert line.count("'k'") > 1 and "..." in line


@pytest.mark.parametrize("value", [HOSTILE, [HOSTILE], {"name": HOSTILE}])
def test_a_console_line_is_inert(
    capsys: pytest.CaptureFixture[str], restore_logging: None, value: object
) -> None:
    log.configure("info", json=False)
    logger = structlog.get_logger("reaper.runner")
    logger.warning(HOSTILE, sweep=HOSTILE, index=value)
    try:
        # A traceback keeps its lines (an exception's message may span several), no more.
        raise ValueError(HOSTILE.replace("\n", " "))
    except ValueError:
        logger.exception("sweep_failed", sweep="nodes_silent")
    logging.getLogger("psycopg").warning("notice: %s", HOSTILE)
    text = capsys.readouterr().err
    assert not any(ch in text for ch in ACTIVE), repr(text)
    assert "\\x1b[2J" in text and "\\u202e" in text
    assert not any(line.startswith("fake") for line in text.splitlines())


def test_a_json_line_is_inert_and_keeps_the_name_exactly(
    capsys: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    log.configure("info", json=True)
    structlog.get_logger("reaper.runner").warning("index_invalid", index=HOSTILE)
    (line,) = lines(capsys)
    assert not any(ch in line for ch in ACTIVE) and "\n" not in line
    assert json.loads(line)["index"] == HOSTILE

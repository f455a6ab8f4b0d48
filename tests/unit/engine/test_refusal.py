"""A refusal is its own outcome: a run that a safety check stops before its first delete is
``refused``, counted and logged apart from a failure."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, cast

import pytest
import structlog
from prometheus_client import CollectorRegistry

from reaper import errors
from reaper.config.engine import engine_options
from reaper.config.settings import build_settings
from reaper.config.sweeps import by_name, configured_sweeps
from reaper.engine.run import RunRequest, Sweeper
from reaper.metrics import Metrics
from reaper.vocab import Outcome

NOW = datetime(2026, 5, 1, tzinfo=UTC)
# The run's one canonical line is one of these.
CANONICAL = {"sweep_finished", "sweep_skipped", "sweep_refused", "sweep_failed"}


def _all_refusals() -> list[type[errors.Refusal]]:
    found: list[type[errors.Refusal]] = []
    todo: list[type[errors.Refusal]] = [errors.Refusal]
    while todo:
        kind = todo.pop()
        found.append(kind)
        todo.extend(kind.__subclasses__())
    return found


class _Session:
    def __init__(self, exc: Exception) -> None:
        self._exc = exc

    def try_advisory_locks(self, keys: Any) -> bool:
        return True

    def release_advisory_locks(self) -> None:
        pass

    def now(self, pinned: datetime | None = None) -> datetime:
        return pinned or NOW

    def statements(self, *args: Any) -> Any:
        raise self._exc


class _Database:
    def __init__(self, exc: Exception) -> None:
        self._exc = exc

    @contextlib.contextmanager
    def session(self, *, read_only: bool = False, since: float | None = None) -> Iterator[_Session]:
        yield _Session(self._exc)


def _run(exc: Exception) -> tuple[Any, Metrics, list[dict[str, Any]]]:
    settings = build_settings({"dsn": "postgresql://reaper@127.0.0.1/reaper"})
    sweep = by_name(configured_sweeps(settings))["nodes_silent"]
    metrics = Metrics([sweep], CollectorRegistry())
    with structlog.testing.capture_logs() as logs:
        result = Sweeper().run(
            cast(Any, _Database(exc)),
            sweep,
            engine_options(settings),
            RunRequest(now=NOW),
            metrics=metrics,
        )
    return result, metrics, logs


def _runs(metrics: Metrics, outcome: str) -> float | None:
    return metrics.registry.get_sample_value(
        "reaper_sweep_runs_total", {"sweep": "nodes_silent", "outcome": outcome}
    )


def test_the_refused_outcome_is_counted_from_zero() -> None:
    settings = build_settings({"dsn": "postgresql://reaper@127.0.0.1/reaper"})
    metrics = Metrics(configured_sweeps(settings), CollectorRegistry())
    assert _runs(metrics, Outcome.REFUSED) == 0


@pytest.mark.parametrize("kind", _all_refusals(), ids=lambda k: k.__name__)
def test_every_refusal_is_reported_as_refused(kind: type[errors.Refusal]) -> None:
    result, metrics, logs = _run(kind("sweep nodes_silent: refused, and why"))
    assert (result.outcome, result.error_type) == (Outcome.REFUSED, kind.__name__)
    assert result.failed and result.error == "sweep nodes_silent: refused, and why"
    assert (_runs(metrics, "refused"), _runs(metrics, "failure")) == (1, 0)
    (line,) = [e for e in logs if e["event"] in CANONICAL]
    assert line["event"] == "sweep_refused" and "exc_info" not in line
    assert line["error"] == "sweep nodes_silent: refused, and why"


@pytest.mark.parametrize(
    "exc",
    [errors.DatabaseError("boom"), errors.BatchStalled(), errors.ConfigError(), KeyError("bug")],
    ids=lambda e: type(e).__name__,
)
def test_other_errors_stay_failures(exc: Exception) -> None:
    result, metrics, logs = _run(exc)
    assert result.outcome == Outcome.FAILURE and result.failed
    assert (_runs(metrics, "refused"), _runs(metrics, "failure")) == (0, 1)
    assert [e["event"] for e in logs if e["event"] in CANONICAL] == ["sweep_failed"]

"""Metrics as a scrape sees them: every label set at 0 before any deletion, deletion counters
by reason equal to the rows that went, and ``run-once --metrics-file`` writing a text file
that Prometheus' own parser reads, replaced atomically."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from reaper.metrics import Metrics
from reaper.vocab import Outcome
from tests.support import (
    BUILTIN_SWEEPS,
    sample,
    textfile_samples,
)
from tests.support.metrics import REASONS


def test_every_label_set_is_zero_before_any_deletion(registry: CollectorRegistry) -> None:
    Metrics(BUILTIN_SWEEPS, registry)
    value = registry.get_sample_value
    for table, reason in REASONS:
        assert value("reaper_deleted_rows_total", {"table": table, "reason": reason}) == 0
    for s in BUILTIN_SWEEPS:
        for outcome in Outcome:
            assert value("reaper_sweep_runs_total", {"sweep": s.name, "outcome": outcome}) == 0
        assert value("reaper_sweep_duration_seconds_count", {"sweep": s.name}) == 0
        assert value("reaper_sweep_last_success_timestamp_seconds", {"sweep": s.name}) == 0
        assert value("reaper_storage_rows", {"table": s.table}) == 0
    # And a scrape shows them (absent series would break increase() and absent() alerts).
    samples = textfile_samples(generate_latest(registry).decode())
    for table, reason in REASONS:
        assert sample(samples, "reaper_deleted_rows_total", table=table, reason=reason) == 0


def test_build_info_names_the_versions_and_learns_the_server() -> None:
    import platform
    from importlib import metadata

    from reaper import __version__

    registry = CollectorRegistry()
    metrics = Metrics(BUILTIN_SWEEPS, registry)
    base = {
        "version": __version__,
        "python": platform.python_version(),
        "psycopg": metadata.version("psycopg"),
    }
    assert registry.get_sample_value("reaper_build_info", {**base, "postgresql": ""}) == 1
    metrics.database_answered(True, 180001)
    metrics.database_answered(True, 180001)
    samples = [s for m in registry.collect() for s in m.samples if s.name == "reaper_build_info"]
    assert [(s.labels, s.value) for s in samples] == [({**base, "postgresql": "18.1"}, 1)]
    metrics.database_answered(True, 160004)  # a failover to another major
    samples = [s for m in registry.collect() for s in m.samples if s.name == "reaper_build_info"]
    assert [s.labels["postgresql"] for s in samples] == ["16.4"]


def test_no_created_series() -> None:
    """prometheus-client adds a `_created` series to every counter and histogram label set
    unless told not to: none is exported."""
    registry = CollectorRegistry()
    metrics = Metrics(BUILTIN_SWEEPS, registry, daemon=True)
    metrics.sweep_finished(BUILTIN_SWEEPS[0].name, Outcome.SUCCESS, 0.5)
    text = generate_latest(registry).decode()
    assert "reaper_sweep_runs_total{" in text
    assert "_created" not in text


def test_the_daemons_own_gauges_only_where_the_daemon_keeps_them() -> None:
    registry = CollectorRegistry()
    Metrics(BUILTIN_SWEEPS, registry)  # run-once's metrics file
    for name in ("reaper_database_up", "reaper_config_last_reload_successful"):
        assert registry.get_sample_value(name) is None
    registry = CollectorRegistry()
    metrics = Metrics(BUILTIN_SWEEPS, registry, daemon=True)
    assert registry.get_sample_value("reaper_database_up") == 0  # no answer yet
    assert registry.get_sample_value("reaper_config_last_reload_successful") == 1
    loaded = registry.get_sample_value("reaper_config_last_reload_success_timestamp_seconds")
    assert loaded and loaded > 0
    metrics.config_loaded(False)
    assert registry.get_sample_value("reaper_config_last_reload_successful") == 0
    assert (
        registry.get_sample_value("reaper_config_last_reload_success_timestamp_seconds") == loaded
    )
    metrics.database_answered(True)
    assert registry.get_sample_value("reaper_database_up") == 1
    metrics.database_answered(False)
    assert registry.get_sample_value("reaper_database_up") == 0

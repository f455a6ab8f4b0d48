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

"""Metrics as a scrape sees them: every label set at 0 before any deletion, deletion counters
by reason equal to the rows that went, and ``run-once --metrics-file`` writing a text file
that Prometheus' own parser reads, replaced atomically."""

from __future__ import annotations

from reaper.config.engine import engine_options
from reaper.dev import demo
from reaper.engine.run import run_sweep, run_sweeps
from reaper.metrics import Metrics
from tests.support import (
    BUILTIN_SWEEPS,
    KEYS,
    NOW,
    add_node,
    census,
    small_sizes,
    sweeps_of,
)
from tests.support.metrics import REASONS, expected_deletions


def test_deletion_counters_equal_the_rows_deleted(dsn, conn, database, settings, registry) -> None:
    demo.seed(dsn, small_sizes())
    before = census(conn)
    metrics = Metrics(BUILTIN_SWEEPS, registry)
    results = run_sweeps(
        database, tuple(sweeps_of(settings).values()), engine_options(settings), metrics=metrics
    )
    assert all(r.outcome == "success" for r in results), [r.error for r in results]
    after = census(conn)
    value = registry.get_sample_value
    counted = {
        (t, r): value("reaper_deleted_rows_total", {"table": t, "reason": r}) for t, r in REASONS
    }
    assert counted == expected_deletions()
    # The counters agree with each sweep's result and with the rows that left each table.
    for r in results:
        assert counted[r.table, r.reason] == r.rows
    for table in KEYS:
        by_table = sum(n for (t, _), n in counted.items() if t == table)
        assert by_table == before[table]["garbage"] - after[table]["garbage"]
        assert after[table] == {"garbage": 0, "keep": before[table]["keep"]}
    for s in BUILTIN_SWEEPS:
        runs = value("reaper_sweep_runs_total", {"sweep": s.name, "outcome": "success"})
        assert runs == 1
        assert value("reaper_sweep_duration_seconds_count", {"sweep": s.name}) == 1
        assert value("reaper_sweep_last_success_timestamp_seconds", {"sweep": s.name}) > 0


def test_a_dry_run_counts_no_deletion(conn, database, settings, registry) -> None:
    add_node(conn, "old", enrolled_at=NOW.replace(year=2020))
    metrics = Metrics(BUILTIN_SWEEPS, registry)
    result = run_sweep(
        database,
        sweeps_of(settings)["nodes_silent"],
        engine_options(settings),
        metrics=metrics,
        dry_run=True,
    )
    assert result.rows == 1
    assert (
        registry.get_sample_value(
            "reaper_deleted_rows_total", {"table": "nodes", "reason": "silent"}
        )
        == 0
    )

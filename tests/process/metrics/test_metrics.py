"""Metrics as a scrape sees them: every label set at 0 before any deletion, deletion counters
by reason equal to the rows that went, and ``run-once --metrics-file`` writing a text file
that Prometheus' own parser reads, replaced atomically."""

from __future__ import annotations

import os

import psycopg

from reaper.dev import demo
from tests.support import (
    BUILTIN_SWEEPS,
    KEYS,
    run_reaper,
    sample,
    small_sizes,
    textfile_samples,
)
from tests.support.metrics import REASONS, expected_deletions


def estimates(dsn: str) -> dict[str, float]:
    """The catalog's row estimate of each swept table."""
    with psycopg.connect(dsn, autocommit=True) as c:
        return dict(
            c.execute(
                "SELECT relname, greatest(reltuples, 0) FROM pg_class"
                " WHERE relname = ANY(%s) AND relkind = 'r'",
                (list(KEYS),),
            ).fetchall()
        )


def test_metrics_file_parses_and_is_replaced_atomically(dsn, conn, tmp_path) -> None:
    demo.seed(dsn, small_sizes())
    before = estimates(dsn)
    metrics_file = tmp_path / "reaper.prom"
    metrics_file.write_text("# an earlier run's file\n")
    # A reader that opened the earlier file keeps reading it whole: the new file is renamed
    # over it, never truncated and rewritten in place.
    with metrics_file.open() as earlier:
        run = run_reaper("run-once", "--metrics-file", str(metrics_file), env={"REAPER_DSN": dsn})
        assert run.code == 0, run.stderr
        assert earlier.read() == "# an earlier run's file\n"
    assert os.listdir(tmp_path) == ["reaper.prom"]  # no temporary file left behind
    text = metrics_file.read_text()
    samples = textfile_samples(text)
    for (table, reason), n in expected_deletions().items():
        assert sample(samples, "reaper_deleted_rows_total", table=table, reason=reason) == n
    for s in BUILTIN_SWEEPS:
        assert sample(samples, "reaper_sweep_runs_total", sweep=s.name, outcome="success") == 1
        assert sample(samples, "reaper_sweep_runs_total", sweep=s.name, outcome="failure") == 0
        assert sample(samples, "reaper_sweep_duration_seconds_count", sweep=s.name) == 1
        stamp = sample(samples, "reaper_sweep_last_success_timestamp_seconds", sweep=s.name)
        assert stamp is not None and stamp > 0
    # Table sizes come from the catalog's estimate (autovacuum may refresh it meanwhile).
    after = estimates(dsn)
    for table in KEYS:
        got = sample(samples, "reaper_storage_rows", table=table)
        assert got in (before[table], after[table]), (table, got, before[table], after[table])
        assert got > 0
    assert "# TYPE reaper_deleted_rows_total counter" in text


def test_metrics_file_of_an_empty_database_has_every_series_at_zero(dsn, tmp_path) -> None:
    metrics_file = tmp_path / "reaper.prom"
    run = run_reaper("run-once", "--metrics-file", str(metrics_file), env={"REAPER_DSN": dsn})
    assert run.code == 0, run.stderr
    samples = textfile_samples(metrics_file.read_text())
    for table, reason in REASONS:
        assert sample(samples, "reaper_deleted_rows_total", table=table, reason=reason) == 0

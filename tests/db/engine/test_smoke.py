from __future__ import annotations

from reaper.config.engine import engine_options
from reaper.engine.run import run_sweeps
from tests.support import BUILTIN_SWEEPS, sweeps_of


def test_every_sweep_runs_on_an_empty_schema(database, settings) -> None:
    results = run_sweeps(database, tuple(sweeps_of(settings).values()), engine_options(settings))
    assert [r.outcome for r in results] == ["success"] * len(BUILTIN_SWEEPS)
    assert sum(r.rows for r in results) == 0

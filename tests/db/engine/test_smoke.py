from __future__ import annotations

from reaper.config.sweeps import BUILTIN_SWEEPS
from reaper.engine.run import run_sweeps


def test_every_sweep_runs_on_an_empty_schema(database, settings) -> None:
    results = run_sweeps(database, BUILTIN_SWEEPS, settings)
    assert [r.outcome for r in results] == ["success"] * len(BUILTIN_SWEEPS)
    assert sum(r.rows for r in results) == 0

"""A run with nothing to delete is never refused by the full-table interlock: once this process
emptied (or nearly emptied) a table in the window, with a sweep allowed to (max_eligible_fraction
1), the other sweeps of that table, which find nothing eligible, succeed instead of failing
run after run; one that finds rows to delete is still refused.
"""

from __future__ import annotations

import tomllib
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from reaper.config.settings import build_settings
from reaper.config.sweeps import configured_sweeps
from reaper.daemon.scheduler import Daemon
from tests.support.safety_interlock import BIG, _big

pytestmark = pytest.mark.fresh_db

SWEEPS = """
[sweeps.everything]
table = "public.big"
reason = "old"
age = "created_at"
retention = "30d"
max_eligible_fraction = 1

[sweeps.first_part]
table = "public.big"
reason = "old"
age = "created_at"
where = { part = "first" }
retention = "30d"
"""


@pytest.mark.parametrize("left", [0, 40], ids=["emptied", "nearly-emptied"])
def test_after_a_table_is_emptied_a_run_with_nothing_to_delete_succeeds(
    dsn: str, conn: psycopg.Connection[Any], left: int
) -> None:
    conn.execute(BIG)
    if left:
        # ``left`` young rows that no sweep may delete: 2% of the table at the window's start.
        conn.execute("UPDATE big SET created_at = now() WHERE part = 'last'")
    settings = build_settings({"dsn": dsn, "listen": "127.0.0.1:0"}, tomllib.loads(SWEEPS))
    daemon = Daemon(
        settings,
        [s for s in configured_sweeps(settings) if s.name in ("everything", "first_part")],
        registry=CollectorRegistry(),
    )
    daemon.db.open()
    try:
        emptied = daemon.run_sweep("everything")
        assert emptied is not None and emptied.outcome == "success", emptied and emptied.error
        assert _big(conn) == left
        for _ in range(3):
            nothing = daemon.run_sweep("first_part")
            assert nothing is not None
            assert (nothing.outcome, nothing.rows, nothing.error) == ("success", 0, None)
        failures = daemon.metrics.registry.get_sample_value(
            "reaper_sweep_runs_total", {"sweep": "first_part", "outcome": "failure"}
        )
        assert failures == 0
        # Rows to delete again (the first part back, all past the cutoff): refused, since
        # they would finish the table in the window.
        conn.execute(
            "INSERT INTO big (id, created_at) SELECT i, now() - interval '60 days' "
            "FROM generate_series(1, 950) i"
        )
        refused = daemon.run_sweep("first_part")
        assert refused is not None and refused.error_type == "FullTableRefused"
        assert _big(conn) == left + 950
    finally:
        daemon.stop(timedelta(seconds=5))

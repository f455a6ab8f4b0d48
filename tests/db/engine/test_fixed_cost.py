"""A statement's fixed cost is part of a batch's cost, on a real PostgreSQL: a statement-level
trigger (with or without a transition table) that costs more than the batch time target
whatever the statement deletes makes a heap walk's ranges larger, not smaller, and the walk
crosses the live part of the table in a few statements."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import structlog
from prometheus_client import CollectorRegistry

from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import build_settings
from reaper.db import Database
from reaper.engine.run import run_sweep
from reaper.metrics import Metrics
from tests.support import enabled

# Each batch's statement-level trigger sleeps this long: twice the 50 ms batch target.
SLEEP_SECONDS = 0.1


@pytest.mark.fresh_db
@pytest.mark.parametrize(
    "trigger",
    [
        "CREATE TRIGGER slow AFTER DELETE ON events FOR EACH STATEMENT EXECUTE FUNCTION slow();",
        "CREATE TRIGGER slow AFTER DELETE ON events REFERENCING OLD TABLE AS gone"
        " FOR EACH STATEMENT EXECUTE FUNCTION slow();",
    ],
    ids=["statement", "transition_table"],
)
def test_a_slow_statement_trigger_makes_ranges_larger(
    dsn: str, conn: psycopg.Connection[Any], trigger: str
) -> None:
    # One stale row in a thousand (about one in every 18th block) in the first half of about
    # 3,600 blocks, then live rows only.
    conn.execute(
        "CREATE TABLE events (id bigint, logged_at timestamptz NOT NULL, pad text);"
        "INSERT INTO events SELECT g, CASE WHEN g % 1000 = 0 AND g <= 100000"
        " THEN now() - interval '60 days' ELSE now() END, repeat('x', 100)"
        " FROM generate_series(1, 200000) g;"
        "ANALYZE events;"
        f"CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS"
        f" $$ BEGIN PERFORM pg_sleep({SLEEP_SECONDS}); RETURN NULL; END $$;" + trigger
    )
    settings = build_settings(
        {"dsn": dsn, "busy_share": "1", "strategy": "heap"},
        {
            "sweeps": {
                "events": {
                    "table": "public.events",
                    "reason": "old",
                    "age": "logged_at",
                    "retention": "30d",
                    "max_eligible_fraction": "1",
                }
            }
        },
    )
    assert settings.batch_target_seconds.total_seconds() < SLEEP_SECONDS
    (sweep,) = enabled(settings, ["events"])
    with structlog.testing.capture_logs(), Database(connection_settings(settings)) as db:
        result = run_sweep(
            db, sweep, engine_options(settings), metrics=Metrics([sweep], CollectorRegistry())
        )
    assert result.outcome == "success", result.error
    assert result.rows == 100
    left = conn.execute(
        "SELECT count(*) FROM events WHERE logged_at < now() - '30d'::interval"
    ).fetchone()
    assert left == (0,)
    # Without the fixed part in the model, ranges halved toward one block with every batch
    # over the target and crossed the rest a few blocks per statement.
    assert result.batches <= 12, result.batches

"""Undeletable rows cost little, once, on a real PostgreSQL: rows a trigger refuses (a legal
hold that raises) are isolated in about log2(n) failed statements each, every other row
goes, and the same process's next run leaves them out untried while they stand unchanged; a
row that changed is tried again."""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest
import structlog
from prometheus_client import CollectorRegistry

from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import Settings, build_settings
from reaper.db import Database
from reaper.engine.result import SweepResult
from reaper.engine.run import Sweeper
from reaper.metrics import Metrics
from tests.support import enabled

STALE, HELD = 2000, 40


def declared(dsn: str, strategy: str) -> Settings:
    return build_settings(
        {"dsn": dsn, "busy_share": "1", "strategy": strategy},
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


def seed(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "CREATE TABLE events (id bigint PRIMARY KEY, logged_at timestamptz NOT NULL,"
        " hold boolean NOT NULL DEFAULT false, note text);"
        "CREATE INDEX ON events (logged_at);"
        "CREATE FUNCTION hold() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN IF OLD.hold THEN RAISE EXCEPTION 'legal hold on %', OLD.id; END IF;"
        " RETURN OLD; END $$;"
        "CREATE TRIGGER hold BEFORE DELETE ON events FOR EACH ROW EXECUTE FUNCTION hold();"
    )
    conn.execute(
        "INSERT INTO events (id, logged_at, hold)"
        " SELECT g, now() - interval '60 days', g %% %s = 0"
        " FROM generate_series(1, %s::int) g",
        (STALE // HELD, STALE),
    )
    conn.execute(
        "INSERT INTO events (id, logged_at) SELECT g, now() FROM generate_series(100001, 100200) g"
    )
    conn.execute("ANALYZE events")


def failed_statements(logs: list[dict[str, Any]]) -> int:
    """Each failed batch logs batch_split; each row that fails alone, row_skipped."""
    return sum(e["event"] in ("batch_split", "row_skipped") for e in logs)


@pytest.mark.fresh_db
@pytest.mark.parametrize("strategy", ["heap", "index"])
def test_held_rows_are_paid_for_once(
    dsn: str, conn: psycopg.Connection[Any], strategy: str
) -> None:
    seed(conn)
    settings = declared(dsn, strategy)
    (sweep,) = enabled(settings, ["events"])
    metrics = Metrics([sweep], CollectorRegistry())
    sweeper = Sweeper()  # the daemon's: one per process

    def run() -> tuple[SweepResult, list[dict[str, Any]]]:
        with structlog.testing.capture_logs() as logs:
            result = sweeper.run(db, sweep, engine_options(settings), metrics=metrics)
        assert result.outcome == "success", result.error
        return result, logs

    def skipped() -> float | None:
        return metrics.registry.get_sample_value(
            "reaper_skipped_rows_total", {"table": "events", "reason": "error"}
        )

    with structlog.testing.capture_logs(), Database(connection_settings(settings)) as db:
        first, logs = run()
        assert first.rows == STALE - HELD
        assert first.skipped == {"error": HELD}
        assert 0 < failed_statements(logs) <= HELD * (math.ceil(math.log2(STALE)) + 1)
        assert skipped() == HELD

        # New garbage arrives: the next run deletes it, and never touches a held row.
        conn.execute(
            "INSERT INTO events (id, logged_at) SELECT g, now() - interval '60 days'"
            " FROM generate_series(200001, 200500) g"
        )
        second, logs = run()
        assert (second.rows, second.skipped, second.known_undeletable) == (500, {}, HELD)
        assert failed_statements(logs) == 0
        assert skipped() == HELD  # counted once
        (line,) = [e for e in logs if e["event"] == "sweep_finished"]
        assert line["known_undeletable"] == HELD

        # A hold lifted (the row changes: a new version) goes; a held row that changed is
        # tried again, fails again, and is remembered again.
        conn.execute("UPDATE events SET hold = false WHERE id = %s", (STALE // HELD,))
        conn.execute("UPDATE events SET note = 'seen' WHERE id = %s", (2 * STALE // HELD,))
        third, logs = run()
        assert (third.rows, third.skipped, third.known_undeletable) == (1, {"error": 1}, HELD - 2)
        fourth, logs = run()
        assert (fourth.rows, fourth.skipped, fourth.known_undeletable) == (0, {}, HELD - 1)
        assert failed_statements(logs) == 0

    kept = conn.execute(
        "SELECT count(*) FROM events WHERE logged_at < now() - '30d'::interval"
    ).fetchone()
    assert kept == (HELD - 1,)

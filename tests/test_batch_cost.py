"""Batches whose cost is not proportional to the rows they select, on a real PostgreSQL.

- A batch never deletes more rows than its limit, however much garbage a heap range holds.
- A walk over a table without garbage keeps its ranges large.
- A batch past statement_timeout (a cascade, a slow trigger) is retried smaller until it
  fits, and the run finishes.
- The request sweep's cost does not grow with the number of ephemeral tokens.
- A row whose delete always fails (a RESTRICT reference from a table no sweep deletes, a
  trigger that raises) is isolated, skipped, logged once with its SQLSTATE and counted in
  reaper_skipped_rows_total; every other eligible row goes.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
import structlog
from prometheus_client import CollectorRegistry
from psycopg import sql

from reaper import cli
from reaper.db import Database
from reaper.metrics import Metrics
from reaper.runner import SweepResult, run_sweep
from reaper.settings import Settings, build_settings
from tests.support import NOW, SWEEPS

STRATEGIES = pytest.mark.parametrize("strategy", ["heap", "index"])


def declared(dsn: str, table: str, **extra: Any) -> Settings:
    return build_settings(
        {"dsn": dsn, **extra},
        {
            "sweeps": {
                "events": {
                    "table": table,
                    "reason": "old",
                    "predicate": "logged_at < %(cutoff)s",
                    "retention": "30d",
                    # Nearly all of each table is garbage on purpose: opted out of the
                    # full-table interlock (docs/safety.md).
                    "max_eligible_fraction": "1",
                }
            }
        },
    )


def sweep_events(
    settings: Settings, **kwargs: Any
) -> tuple[SweepResult, Metrics, list[dict[str, Any]]]:
    (sweep,) = cli.enabled_sweeps(settings, ["events"])
    metrics = Metrics([sweep], CollectorRegistry())
    with structlog.testing.capture_logs() as logs, Database.from_settings(settings) as db:
        result = run_sweep(db, sweep, settings, metrics=metrics, **kwargs)
    return result, metrics, logs


def skipped(metrics: Metrics, table: str, reason: str) -> float | None:
    return metrics.registry.get_sample_value(
        "reaper_skipped_rows_total", {"table": table, "reason": reason}
    )


def counts(conn: psycopg.Connection[Any], table: str) -> tuple[int, int]:
    row = conn.execute(
        f"SELECT count(*) FILTER (WHERE logged_at < now() - interval '30 days'),"
        f" count(*) FILTER (WHERE logged_at >= now() - interval '30 days') FROM {table}"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_batch_never_deletes_more_than_its_limit(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    # Live rows first in the heap, then a run of garbage: the range that grew across the
    # live rows reaches the garbage with room for many times the batch size.
    conn.execute(
        "CREATE TABLE events (id bigint, logged_at timestamptz NOT NULL);"
        "INSERT INTO events SELECT g, now() FROM generate_series(1, 40000) g;"
        "INSERT INTO events SELECT g, now() - interval '60 days'"
        " FROM generate_series(1, 10000) g;"
        "ANALYZE events;"
    )
    settings = declared(dsn, "events", strategy="heap", batch_size=200)
    per_batch: list[int] = []
    seen = [0]

    def on_batch(r: SweepResult) -> None:
        per_batch.append(r.rows - seen[0])
        seen[0] = r.rows

    result, _, _ = sweep_events(settings, on_batch=on_batch)
    assert result.outcome == "success", result.error
    assert counts(conn, "events") == (0, 40000)
    assert result.rows == 10000 == sum(per_batch)
    assert max(per_batch) == 200


def test_a_walk_without_garbage_keeps_its_ranges_large(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    conn.execute(
        "CREATE TABLE events (id bigint, logged_at timestamptz NOT NULL);"
        "INSERT INTO events SELECT g, now() FROM generate_series(1, 200000) g;"
        "ANALYZE events;"
    )
    blocks = conn.execute("SELECT relpages FROM pg_class WHERE relname = 'events'").fetchone()
    assert blocks is not None and blocks[0] > 1000
    settings = declared(dsn, "events", strategy="heap", batch_size=100)
    result, _, _ = sweep_events(settings)
    assert (result.outcome, result.rows) == ("success", 0)
    # Ranges grow (up to 2x a batch) across the empty heap: far fewer batches than blocks.
    assert result.batches <= 20, (result.batches, blocks[0])


@STRATEGIES
def test_a_cascade_past_statement_timeout_is_retried_smaller_until_it_finishes(
    dsn: str, conn: psycopg.Connection[Any], strategy: str
) -> None:
    conn.execute(
        "CREATE TABLE events (id bigint PRIMARY KEY, logged_at timestamptz NOT NULL);"
        "CREATE INDEX ON events (logged_at);"
        "CREATE TABLE details (event_id bigint REFERENCES events ON DELETE CASCADE,"
        " body text);"
        "CREATE INDEX ON details (event_id);"
        "INSERT INTO events SELECT g, now() - interval '60 days' FROM generate_series(1, 300) g;"
        "INSERT INTO events SELECT g, now() FROM generate_series(301, 400) g;"
        "INSERT INTO details SELECT 1 + g % 400, 'x' FROM generate_series(0, 399999) g;"
        "ANALYZE events; ANALYZE details;"
    )
    settings = declared(
        dsn, "events", strategy=strategy, batch_size=300, statement_timeout="300ms"
    )
    result, metrics, _ = sweep_events(settings)
    assert result.outcome == "success", result.error
    assert result.rows == 300
    assert counts(conn, "events") == (0, 100)
    row = conn.execute("SELECT count(*) FROM details").fetchone()
    assert row == (100_000,)
    # Whatever the machine's speed, nothing was skipped: every row fit in some batch.
    assert result.skipped == {}
    assert skipped(metrics, "events", "timeout") == 0


@STRATEGIES
def test_a_slow_trigger_shrinks_the_batches_until_they_fit(
    dsn: str, conn: psycopg.Connection[Any], strategy: str
) -> None:
    conn.execute(
        "CREATE TABLE events (id bigint, logged_at timestamptz NOT NULL);"
        "CREATE INDEX ON events (logged_at);"
        "INSERT INTO events SELECT g, now() - interval '60 days' FROM generate_series(1, 120) g;"
        "INSERT INTO events SELECT g, now() FROM generate_series(1, 30) g;"
        "ANALYZE events;"
        "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN PERFORM pg_sleep(0.01); RETURN OLD; END $$;"
        "CREATE TRIGGER slow BEFORE DELETE ON events FOR EACH ROW EXECUTE FUNCTION slow();"
    )
    # 100 rows take a second: past the timeout; about 20 rows fit.
    settings = declared(
        dsn, "events", strategy=strategy, batch_size=100, statement_timeout="400ms"
    )
    result, _, logs = sweep_events(settings)
    assert result.outcome == "success", result.error
    assert (result.rows, counts(conn, "events")) == (120, (0, 30))
    assert result.timed_out_batches >= 1
    splits = [e for e in logs if e["event"] == "batch_split"]
    assert splits and all(e["reason"] == "timeout" and e["sqlstate"] == "57014" for e in splits)
    # The first batch (100 rows) timed out and the first retry was smaller.
    assert splits[0]["rows"] == 100
    assert len(splits) == 1 or splits[1]["rows"] < 100


@STRATEGIES
def test_a_restricted_row_is_skipped_and_the_rest_go(
    dsn: str, conn: psycopg.Connection[Any], strategy: str
) -> None:
    conn.execute(
        "CREATE TABLE events (id bigint PRIMARY KEY, logged_at timestamptz NOT NULL);"
        "CREATE INDEX ON events (logged_at);"
        "INSERT INTO events SELECT g, now() - interval '60 days'"
        " FROM generate_series(1, 20000) g;"
        "INSERT INTO events SELECT g, now() FROM generate_series(20001, 20100) g;"
        "CREATE TABLE audit (event_id bigint REFERENCES events ON DELETE RESTRICT);"
        "INSERT INTO audit VALUES (3);"
        "ANALYZE events;"
    )
    settings = declared(dsn, "events", strategy=strategy, batch_size=1000)
    result, metrics, logs = sweep_events(settings)
    assert result.outcome == "success", result.error
    assert result.rows == 19_999
    assert counts(conn, "events") == (1, 100)
    assert conn.execute("SELECT id FROM events WHERE logged_at < now() - '30d'::interval"
                        ).fetchall() == [(3,)]
    assert result.skipped == {"foreign_key": 1}
    assert skipped(metrics, "events", "foreign_key") == 1
    assert skipped(metrics, "events", "error") == 0
    (line,) = [e for e in logs if e["event"] == "row_skipped"]
    assert (line["reason"], line["sqlstate"], line["table"]) == ("foreign_key", "23503", "events")
    assert "audit" in line["error"]
    # The next run skips it again, and deletes nothing else.
    again, _, _ = sweep_events(settings)
    assert (again.outcome, again.rows, again.skipped) == ("success", 0, {"foreign_key": 1})


@STRATEGIES
def test_a_trigger_that_raises_on_one_row_skips_only_that_row(
    dsn: str, conn: psycopg.Connection[Any], strategy: str
) -> None:
    conn.execute(
        "CREATE TABLE events (id bigint, logged_at timestamptz NOT NULL);"
        "CREATE INDEX ON events (logged_at);"
        "INSERT INTO events SELECT g, now() - interval '60 days' FROM generate_series(1, 3000) g;"
        "INSERT INTO events SELECT g, now() FROM generate_series(1, 10) g;"
        "ANALYZE events;"
        "CREATE FUNCTION guard() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN IF OLD.id IN (1500, 2999) THEN RAISE EXCEPTION 'legal hold on %', OLD.id;"
        " END IF; RETURN OLD; END $$;"
        "CREATE TRIGGER guard BEFORE DELETE ON events FOR EACH ROW EXECUTE FUNCTION guard();"
    )
    settings = declared(dsn, "events", strategy=strategy, batch_size=500)
    result, metrics, logs = sweep_events(settings)
    assert result.outcome == "success", result.error
    assert result.rows == 2998
    kept = conn.execute(
        "SELECT id FROM events WHERE logged_at < now() - '30d'::interval ORDER BY id"
    ).fetchall()
    assert kept == [(1500,), (2999,)]
    assert skipped(metrics, "events", "error") == 2
    lines = [e for e in logs if e["event"] == "row_skipped"]
    assert sorted(e["error"].split(": ")[-1] for e in lines) == [
        "legal hold on 1500", "legal hold on 2999"
    ]
    assert {e["sqlstate"] for e in lines} == {"P0001"}


def seed_ephemeral_tokens(
    conn: psycopg.Connection[Any], tokens: int, fresh: int, stale: int
) -> None:
    """``tokens`` unexpired ephemeral tokens, ``fresh`` requests (an hour old) of ordinary
    tokens, ``stale`` requests (40 days old) of the ephemeral tokens."""
    conn.execute(
        "INSERT INTO bootstrap_tokens (token_hash, expires_at, ephemeral)"
        " SELECT 'e' || g, now() + interval '1 day', true FROM generate_series(1, %s) g",
        (tokens,),
    )
    conn.execute(
        "INSERT INTO bootstrap_tokens (token_hash, expires_at, ephemeral)"
        " SELECT 'p' || g, now() + interval '100 days', false FROM generate_series(1, 100) g"
    )
    conn.execute(
        "INSERT INTO enrollment_requests (token_id, peer_id, status, created_at)"
        " SELECT (SELECT min(id) FROM bootstrap_tokens WHERE NOT ephemeral) + g %% 100,"
        " 'keep-' || g, 'pending', now() - interval '1 hour' FROM generate_series(1, %s) g",
        (fresh,),
    )
    conn.execute(
        "INSERT INTO enrollment_requests (token_id, peer_id, status, created_at)"
        " SELECT 1 + g %% %s, 'garbage-' || g, 'pending', now() - interval '40 days'"
        " FROM generate_series(1, %s) g",
        (tokens, stale),
    )
    conn.execute("ANALYZE bootstrap_tokens; ANALYZE enrollment_requests")


def test_the_request_predicate_asks_each_token_by_its_primary_key(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """A row is tested against the ephemeral arm by one probe of bootstrap_tokens' primary
    key before the list of ephemeral tokens (which only the index scan on token_id uses)."""
    seed_ephemeral_tokens(conn, 2000, 2000, 20)
    predicate = SWEEPS["enrollment_requests"].predicate
    plan = "\n".join(
        str(r[0]) for r in conn.execute(
            sql.SQL("EXPLAIN SELECT count(*) FROM enrollment_requests WHERE ")
            + sql.SQL(predicate),
            {"cutoff": NOW - timedelta(days=30), "ephemeral_cutoff": NOW - timedelta(hours=1)},
        ).fetchall()
    )
    assert "Index Scan using bootstrap_tokens_pkey on bootstrap_tokens" in plan, plan
    (filter_line,) = [line for line in plan.splitlines() if "Filter:" in line and "ANY" in line]
    assert filter_line.index("SubPlan") < filter_line.index("ANY"), filter_line


@pytest.mark.slow
def test_requests_sweep_with_400k_ephemeral_tokens(
    dsn: str, conn: psycopg.Connection[Any], make_settings: Any
) -> None:
    seed_ephemeral_tokens(conn, 400_000, 300_000, 2_000)
    settings = make_settings(node_retention="30d", ephemeral_node_retention="1d")
    with Database.from_settings(settings) as db:
        dry = run_sweep(db, SWEEPS["enrollment_requests"], settings, dry_run=True)
        result = run_sweep(db, SWEEPS["enrollment_requests"], settings)
    assert (dry.outcome, dry.rows) == ("success", 2_000), dry.error
    assert (result.outcome, result.rows) == ("success", 2_000), result.error
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE peer_id LIKE 'garbage-%%'),"
        " count(*) FILTER (WHERE peer_id LIKE 'keep-%%') FROM enrollment_requests"
    ).fetchone()
    assert row == (0, 300_000)

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

import threading
from typing import Any

import psycopg
import pytest
import structlog
from prometheus_client import CollectorRegistry
from psycopg import sql

from reaper import sqltext
from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import Settings, build_settings
from reaper.db import Database
from reaper.engine.result import SweepResult
from reaper.engine.run import run_sweep
from reaper.metrics import Metrics
from tests.support import BUILTIN_SWEEPS, SWEEPS, enabled, sweeps_of

STRATEGIES = pytest.mark.parametrize("strategy", ["heap", "index"])


def declared(dsn: str, table: str, **extra: Any) -> Settings:
    # The live-traffic pacer off: this test's own connection, seeding a moment before, would
    # count as live traffic and shorten the batches whose sizes these tests assert.
    return build_settings(
        {"dsn": dsn, "busy_share": "1", **extra},
        {
            "sweeps": {
                "events": {
                    "table": table if "." in table else f"public.{table}",
                    "reason": "old",
                    "age": "logged_at",
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
    (sweep,) = enabled(settings, ["events"])
    metrics = Metrics([sweep], CollectorRegistry())
    with structlog.testing.capture_logs() as logs, Database(connection_settings(settings)) as db:
        result = run_sweep(db, sweep, engine_options(settings), metrics=metrics, **kwargs)
    return result, metrics, logs


def skipped(metrics: Metrics, table: str, reason: str) -> float | None:
    return metrics.registry.get_sample_value(
        "reaper_skipped_rows_total",
        {"table": table.removeprefix("public."), "reason": reason},
    )


def counts(conn: psycopg.Connection[Any], table: str) -> tuple[int, int]:
    row = conn.execute(
        f"SELECT count(*) FILTER (WHERE logged_at < now() - interval '30 days'),"
        f" count(*) FILTER (WHERE logged_at >= now() - interval '30 days') FROM {table}"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.fresh_db
def test_a_batch_never_deletes_more_than_its_limit(dsn: str, conn: psycopg.Connection[Any]) -> None:
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


@pytest.mark.fresh_db
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


@pytest.mark.fresh_db
def test_a_walk_whose_blocks_cost_more_than_the_timeout_stops_trying_whole_ranges(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """Every parent's delete scans its children (no index on the foreign key), so one block
    of parents costs more than statement_timeout: a whole-range delete, which has no row
    limit, can never fit. The walk falls back to limited batches and stays there."""
    conn.execute(
        "CREATE TABLE events (id bigint PRIMARY KEY, logged_at timestamptz NOT NULL);"
        "CREATE TABLE details (event_id bigint REFERENCES events ON DELETE CASCADE,"
        " body text);"
        "INSERT INTO events SELECT g, now() - interval '60 days' FROM generate_series(1, 300) g;"
        "INSERT INTO events SELECT g, now() FROM generate_series(301, 400) g;"
        "INSERT INTO details SELECT 1 + g % 400, 'x' FROM generate_series(0, 59999) g;"
        "ANALYZE events; ANALYZE details;"
    )
    settings = declared(dsn, "events", strategy="heap", batch_size=300, statement_timeout="200ms")
    result, _, _ = sweep_events(settings)
    assert result.outcome == "success", result.error
    assert result.rows == 300
    assert counts(conn, "events") == (0, 100)
    assert result.timed_out_batches <= 12, (result.timed_out_batches, result.batches)


@pytest.mark.fresh_db
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
    settings = declared(dsn, "events", strategy=strategy, batch_size=300, statement_timeout="300ms")
    result, metrics, _ = sweep_events(settings)
    assert result.outcome == "success", result.error
    assert result.rows == 300
    assert counts(conn, "events") == (0, 100)
    # Once a batch timed out, the walk stops trying whole ranges (which have no row limit):
    # a few timeouts while the limit comes down, not one per batch.
    assert result.timed_out_batches <= 12, (result.timed_out_batches, result.batches)
    row = conn.execute("SELECT count(*) FROM details").fetchone()
    assert row == (100_000,)
    # Whatever the machine's speed, nothing was skipped: every row fit in some batch.
    assert result.skipped == {}
    assert skipped(metrics, "events", "timeout") == 0


@pytest.mark.fresh_db
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
    settings = declared(dsn, "events", strategy=strategy, batch_size=100, statement_timeout="400ms")
    result, _, logs = sweep_events(settings)
    assert result.outcome == "success", result.error
    assert (result.rows, counts(conn, "events")) == (120, (0, 30))
    assert result.timed_out_batches >= 1
    splits = [e for e in logs if e["event"] == "batch_split"]
    assert splits and all(e["reason"] == "timeout" and e["sqlstate"] == "57014" for e in splits)
    # The first batch (100 rows) timed out and the first retry was smaller.
    assert splits[0]["rows"] == 100
    assert len(splits) == 1 or splits[1]["rows"] < 100


@pytest.mark.fresh_db
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
    assert conn.execute(
        "SELECT id FROM events WHERE logged_at < now() - '30d'::interval"
    ).fetchall() == [(3,)]
    assert result.skipped == {"foreign_key": 1}
    assert skipped(metrics, "events", "foreign_key") == 1
    assert skipped(metrics, "events", "error") == 0
    (line,) = [e for e in logs if e["event"] == "row_skipped"]
    # 23001 (restrict_violation): PostgreSQL 18's code for an ON DELETE RESTRICT refusal.
    assert (line["reason"], line["table"]) == ("foreign_key", "events")
    assert line["sqlstate"] in ("23503", "23001")
    assert "audit" in line["error"]
    # The next run skips it again, and deletes nothing else.
    again, _, _ = sweep_events(settings)
    assert (again.outcome, again.rows, again.skipped) == ("success", 0, {"foreign_key": 1})


@pytest.mark.fresh_db
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
        "legal hold on 1500",
        "legal hold on 2999",
    ]
    assert {e["sqlstate"] for e in lines} == {"P0001"}


def seed_ephemeral_tokens(
    conn: psycopg.Connection[Any],
    tokens: int,
    fresh: int,
    eligible: int,
    age: str = "40 days",
    fresh_ephemeral: int = 0,
) -> None:
    """``tokens`` unexpired ephemeral tokens, ``fresh`` requests (an hour old) of ordinary
    tokens, ``eligible`` requests (``age`` old, named garbage-N) of the ephemeral tokens, and
    ``fresh_ephemeral`` requests (10 minutes old) of the ephemeral tokens."""
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
        " SELECT 1 + g %% %s, 'garbage-' || g, 'pending', now() - %s::interval"
        " FROM generate_series(1, %s) g",
        (tokens, age, eligible),
    )
    conn.execute(
        "INSERT INTO enrollment_requests (token_id, peer_id, status, created_at)"
        " SELECT 1 + g %% %s, 'keep-e-' || g, 'pending', now() - interval '10 minutes'"
        " FROM generate_series(1, %s) g",
        (tokens, fresh_ephemeral),
    )
    conn.execute("ANALYZE bootstrap_tokens; ANALYZE enrollment_requests")


def planned(conn: psycopg.Connection[Any], query: str, *, heap_walk: bool) -> dict[str, Any]:
    """The plan (EXPLAIN FORMAT JSON, its top node) of ``query`` as reaper's batches plan it:
    after batch_settings.sql for a heap walk, after index_batch_settings.sql for an index
    batch or a gauge, in one transaction (rolled back)."""
    with conn.transaction(force_rollback=True):
        if heap_walk:
            conn.execute(
                sql.SQL(sqltext.engine("batch_settings")), {"lock_timeout_ms": 5, "heap_walk": True}
            )
        else:
            conn.execute(sql.SQL(sqltext.engine("index_batch_settings")))
        row = conn.execute(f"EXPLAIN (FORMAT JSON) {query}").fetchone()
    assert row is not None
    return row[0][0]["Plan"]  # type: ignore[no-any-return]


def nodes_of(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", ()):
        out += nodes_of(child)
    return out


@pytest.mark.parametrize("sweep", [s.name for s in BUILTIN_SWEEPS])
def test_no_builtin_predicate_reads_another_table_whole_per_batch(
    conn: psycopg.Connection[Any], sweep: str
) -> None:
    """Testing one row costs the same however large another table is, as a heap walk tests
    rows and as an index batch (or a gauge) finds them: no array built from a table (``x = ANY
    (ARRAY(SELECT ...))`` is a linear search per row), no hash or merge join and no sequential
    scan of another table (each reads that table whole, in every batch)."""
    seed_ephemeral_tokens(conn, 2000, 2000, 20, fresh_ephemeral=2000)
    s = SWEEPS[sweep]
    where = s.predicate.where.as_string(conn) % {p: "now() - interval '1 hour'" for p in s.cutoffs}
    query = f"SELECT ctid FROM {s.table} WHERE ({where}) LIMIT 1000"
    for heap_walk in (True, False):
        nodes = nodes_of(planned(conn, query, heap_walk=heap_walk))
        shape = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in nodes]
        assert not [n for n in nodes if n["Node Type"] in ("Hash Join", "Merge Join")], shape
        assert not [
            n for n in nodes if n["Node Type"] == "Seq Scan" and n["Relation Name"] != s.table
        ], shape
        assert "ANY" not in str(nodes), shape


def test_the_ephemeral_request_sweep_reads_only_the_rows_it_deletes(
    conn: psycopg.Connection[Any],
) -> None:
    """Found as an index batch and the gauges find them: each ephemeral token, then its
    requests past the cutoff through one range of (token_id, age). Neither the 200,000 fresh
    requests of the same tokens nor the 100,000 old requests of other tokens are read."""
    seed_ephemeral_tokens(conn, 2000, 0, 20, age="2 hours", fresh_ephemeral=200_000)
    conn.execute(
        "INSERT INTO enrollment_requests (token_id, peer_id, status, created_at, resolved_at)"
        " SELECT (SELECT min(id) FROM bootstrap_tokens WHERE NOT ephemeral) + g % 100,"
        " 'keep-old-' || g, 'approved', now() - interval '3 days', now() - interval '2 days'"
        " FROM generate_series(1, 100000) g"
    )
    conn.execute("ANALYZE enrollment_requests")
    where = str(SWEEPS["enrollment_requests_ephemeral"].predicate.text) % {
        "cutoff": "now() - interval '1 hour'"
    }
    for query in (
        f"SELECT ctid FROM enrollment_requests WHERE ({where}) LIMIT 1000",
        f"SELECT count(*) FROM (SELECT 1 FROM enrollment_requests WHERE ({where})"
        " LIMIT 500) AS eligible",
    ):
        nodes = nodes_of(planned(conn, query, heap_walk=False))
        (read,) = [n for n in nodes if n.get("Relation Name") == "enrollment_requests"]
        # The index condition is the whole predicate on the request: the token and the age.
        assert read["Index Name"] == "enrollment_requests_token_id_age_idx", nodes
        assert "token_id = t.id" in read["Index Cond"], read
        assert "GREATEST(resolved_at, created_at) <" in read["Index Cond"], read
        assert "Filter" not in read, read
        (tokens,) = [n for n in nodes if n.get("Relation Name") == "bootstrap_tokens"]
        assert tokens["Index Name"] == "bootstrap_tokens_ephemeral_idx", nodes


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tokens", "fresh", "eligible", "fresh_ephemeral"),
    [
        (400_000, 300_000, 2_000, 0),  # many ephemeral tokens, few of their requests eligible
        (100_000, 100_000, 120_000, 0),  # many tokens and many eligible requests
        (200_000, 0, 100, 1_000_000),
    ],  # many fresh requests of ephemeral tokens, few eligible
    ids=["400k-tokens-2k-eligible", "100k-tokens-120k-eligible", "1m-fresh-100-eligible"],
)
def test_request_sweeps_with_many_ephemeral_tokens(
    dsn: str,
    conn: psycopg.Connection[Any],
    make_settings: Any,
    tokens: int,
    fresh: int,
    eligible: int,
    fresh_ephemeral: int,
) -> None:
    """Neither the dry run nor the run of a request sweep grows with the number of ephemeral
    tokens or of their fresh requests: both finish inside the default statement_timeout,
    every eligible request goes, every fresh one stays."""
    seed_ephemeral_tokens(
        conn, tokens, fresh, eligible, age="2 hours", fresh_ephemeral=fresh_ephemeral
    )
    settings = make_settings(node_retention="30d", ephemeral_node_retention="1h")
    with Database(connection_settings(settings)) as db:
        results = {
            (name, dry): run_sweep(
                db, sweeps_of(settings)[name], engine_options(settings), dry_run=dry
            )
            for name in ("enrollment_requests", "enrollment_requests_ephemeral")
            for dry in (True, False)
        }
    assert {k: (r.outcome, r.rows) for k, r in results.items()} == {
        ("enrollment_requests", True): ("success", 0),
        ("enrollment_requests", False): ("success", 0),
        ("enrollment_requests_ephemeral", True): ("success", eligible),
        ("enrollment_requests_ephemeral", False): ("success", eligible),
    }, [r.error for r in results.values()]
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE peer_id LIKE 'garbage-%%'),"
        " count(*) FILTER (WHERE peer_id LIKE 'keep-%%') FROM enrollment_requests"
    ).fetchone()
    assert row == (0, fresh + fresh_ephemeral)


def seed_indexed_events(conn: psycopg.Connection[Any]) -> None:
    """500 events past the 30-day retention and 100 recent ones, indexed on logged_at."""
    conn.execute(
        "CREATE TABLE events (id bigint, logged_at timestamptz NOT NULL);"
        "CREATE INDEX ON events (logged_at);"
        "INSERT INTO events SELECT g, now() - interval '60 days' FROM generate_series(1, 500) g;"
        "INSERT INTO events SELECT g, now() FROM generate_series(501, 600) g;"
        "ANALYZE events;"
    )


@pytest.mark.fresh_db
@STRATEGIES
def test_a_table_lock_fails_the_run_after_lock_timeout_and_blames_no_row(
    dsn: str, conn: psycopg.Connection[Any], strategy: str
) -> None:
    """A session holding a lock on the whole table (a migration, LOCK TABLE) is waited for
    under --lock-timeout, not the milliseconds a batch gives a held row; past it the run
    fails with the lock timeout, and no row is skipped or counted as held."""
    seed_indexed_events(conn)
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE events IN SHARE MODE")
        settings = declared(dsn, "events", strategy=strategy, lock_timeout="300ms")
        result, metrics, logs = sweep_events(settings)
        holder.rollback()
    assert result.outcome == "failure"
    assert result.sqlstate == "55P03", result
    assert "lock on the whole table" in (result.error or ""), result.error
    assert result.rows == 0 and result.skipped == {}
    assert skipped(metrics, "events", "locked") == 0.0
    assert not [e for e in logs if e["event"] == "row_skipped"]
    assert counts(conn, "events") == (500, 100)


@pytest.mark.fresh_db
@STRATEGIES
def test_a_table_lock_released_within_lock_timeout_is_waited_for(
    dsn: str, conn: psycopg.Connection[Any], strategy: str
) -> None:
    seed_indexed_events(conn)
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE events IN SHARE MODE")
        release = threading.Timer(0.5, holder.rollback)
        release.start()
        try:
            settings = declared(dsn, "events", strategy=strategy, lock_timeout="5s")
            result, _, _ = sweep_events(settings)
        finally:
            release.join()
    assert (result.outcome, result.rows, result.skipped) == ("success", 500, {}), result
    assert counts(conn, "events") == (0, 100)

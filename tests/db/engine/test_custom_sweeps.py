"""Custom sweeps against a real PostgreSQL: a config file alone adds a sweep that run-once
runs (and dry-runs), whose deletions the metrics count under its own reason; the built-ins
can be disabled or given another retention the same way.

The worked example is the gateway's token table of examples/token-table.sql, swept by the
declarations of examples/token-table.toml.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from reaper import cli
from reaper.config.engine import engine_options
from reaper.config.settings import Settings, build_settings
from reaper.config.sweeps import configured_sweeps
from reaper.db import Database, SweepStatements
from reaper.engine.run import run_sweeps
from reaper.metrics import Metrics
from tests.support import enabled

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
EXAMPLE_TOML = EXAMPLES / "token-table.toml"
EXAMPLE_SQL = EXAMPLES / "token-table.sql"

# The tokens of one workspace; the key says whether the example's sweeps must delete it
# (go-) or keep it (stay-). Every "go" row is at least a day past its cutoff, every "stay" row
# a day short of it, so that the seconds between seeding and sweeping cannot matter.
SMALL_SEED = """
INSERT INTO token (external_id, key, active, token_type, workspace_id, created_at, updated_at,
                   expires_at)
SELECT gen_random_uuid(), v.key, v.active, v.token_type, 1,
       now() - v.created * interval '1 day', now() - v.updated * interval '1 day',
       CASE WHEN v.expired THEN now() - interval '400 days' END
FROM (VALUES
    ('go-worker-stale',            true,  'worker',            40,  31, false),
    ('go-worker-stale-inactive',   false, 'worker',            90,  89, false),
    ('stay-worker-fresh',          true,  'worker',            90,  29, false),
    ('stay-worker-new',            true,  'worker',             1,   0, false),
    ('go-machine-old-inactive',    false, 'machine',           91,  91, false),
    ('go-machine-ancient',         false, 'machine',          900, 900, true),
    ('stay-machine-old-active',    true,  'machine',          900, 900, false),
    ('stay-machine-young-inactive', false, 'machine',          89,  89, false),
    ('stay-primary',               true,  'workspace_primary', 900, 900, false),
    ('stay-primary-expired',       true,  'workspace_primary', 900, 900, true),
    ('stay-restricted',            true,  'restricted',       900, 900, false),
    ('stay-restricted-inactive',   false, 'restricted',       900, 900, false)
) AS v (key, active, token_type, created, updated, expired)
"""

# Every test here declares tables of its own: a database of its own each.
pytestmark = pytest.mark.fresh_db


def keys(conn: psycopg.Connection[Any]) -> set[str]:
    return {r[0] for r in conn.execute("SELECT key FROM token")}


@pytest.fixture
def token_conn(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """The test database with the example's token table (and its indexes) added."""
    conn.execute(EXAMPLE_SQL.read_text())
    return conn


def example_settings(dsn: str, **values: Any) -> Settings:
    return cli.load(EXAMPLE_TOML, {"dsn": dsn, **values}).settings


def test_declared_sweeps_delete_the_right_tokens_and_count_under_their_reason(
    dsn: str, token_conn: psycopg.Connection[Any], database: Database
) -> None:
    token_conn.execute(SMALL_SEED)
    before = keys(token_conn)
    settings = example_settings(dsn)
    sweeps = enabled(settings, [])
    registry = CollectorRegistry()
    metrics = Metrics(sweeps, registry)
    labels = {"table": "token", "reason": "machine_inactive"}
    # Pre-initialised: an alert on increase() sees the custom reason from the first scrape.
    assert registry.get_sample_value("reaper_deleted_rows_total", labels) == 0

    results = run_sweeps(database, sweeps, engine_options(settings), metrics=metrics)

    assert [(r.sweep, r.outcome, r.rows) for r in results] == [
        ("worker_tokens", "success", 2),
        ("machine_tokens", "success", 2),
    ]
    assert keys(token_conn) == {k for k in before if k.startswith("stay-")}
    assert registry.get_sample_value("reaper_deleted_rows_total", labels) == 2
    assert (
        registry.get_sample_value(
            "reaper_deleted_rows_total", {"table": "token", "reason": "worker_stale"}
        )
        == 2
    )
    assert (
        registry.get_sample_value(
            "reaper_sweep_runs_total", {"sweep": "machine_tokens", "outcome": "success"}
        )
        == 1
    )


def test_dry_run_of_a_disabled_declaration_shows_what_it_would_delete(
    dsn: str,
    token_conn: psycopg.Connection[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token_conn.execute(SMALL_SEED)
    config = tmp_path / "reaper.toml"
    config.write_text(
        EXAMPLE_TOML.read_text()
        + """
[sweeps.expired_tokens]
enabled = false
table = "public.token"
reason = "expired"
age = "expires_at"
where = { token_type = ["worker", "machine"] }
retention = "1d"
"""
    )
    before = keys(token_conn)
    argv = ["run-once", "--config", str(config), "--dsn", dsn, "--json"]

    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--dry-run", "--sweep", "expired_tokens"])
    assert exit_info.value.code == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert (result["sweep"], result["reason"], result["rows"], result["dry_run"]) == (
        "expired_tokens",
        "expired",
        1,
        True,
    )
    assert keys(token_conn) == before

    # Disabled, it stays out of a plain run; the example's two sweeps run.
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 0
    ran = [r["sweep"] for r in json.loads(capsys.readouterr().out)]
    assert ran == ["worker_tokens", "machine_tokens"]
    assert "go-machine-ancient" not in keys(token_conn)


def test_a_builtin_takes_its_own_retention_from_the_config(
    dsn: str, conn: psycopg.Connection[Any], database: Database
) -> None:
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at) VALUES "
        "('silent-20d', now() - interval '20 days'), ('silent-10d', now() - interval '10 days')"
    )
    default = build_settings({"dsn": dsn})
    shorter = build_settings({"dsn": dsn}, {"sweeps": {"nodes_silent": {"retention": "14d"}}})

    (kept,) = run_sweeps(database, enabled(default, ["nodes_silent"]), engine_options(default))
    assert kept.rows == 0
    (swept,) = run_sweeps(database, enabled(shorter, ["nodes_silent"]), engine_options(shorter))
    assert swept.rows == 1
    assert [r[0] for r in conn.execute("SELECT peer_id FROM nodes")] == ["silent-10d"]


def test_a_sweep_budget_stops_only_that_sweep(
    dsn: str, token_conn: psycopg.Connection[Any], database: Database
) -> None:
    token_conn.execute(SMALL_SEED)
    declared = _example_sweeps()
    declared["worker_tokens"] = {
        **declared["worker_tokens"],
        "batch_size": 1,
        "max_rows_per_run": 1,
    }
    settings = build_settings({"dsn": dsn, "batch_size": "1"}, {"sweeps": declared})
    results = {
        r.sweep: r for r in run_sweeps(database, enabled(settings, []), engine_options(settings))
    }
    assert (results["worker_tokens"].rows, results["worker_tokens"].stopped_by) == (1, "max_rows")
    assert (results["machine_tokens"].rows, results["machine_tokens"].stopped_by) == (2, "done")


def _example_sweeps() -> dict[str, Any]:
    import tomllib

    with EXAMPLE_TOML.open("rb") as fh:
        return dict(tomllib.load(fh)["sweeps"])


def test_a_predicate_naming_a_missing_column_fails_that_sweep_only(
    dsn: str, token_conn: psycopg.Connection[Any], database: Database
) -> None:
    token_conn.execute(SMALL_SEED)
    settings = build_settings(
        {"dsn": dsn},
        {
            "sweeps": {
                "typo": {
                    "table": "public.token",
                    "reason": "stale",
                    "age": "last_seen",
                    "retention": "1d",
                },
                "worker_tokens": _example_sweeps()["worker_tokens"],
            }
        },
    )
    results = {
        r.sweep: r
        for r in run_sweeps(
            database, enabled(settings, ["typo", "worker_tokens"]), engine_options(settings)
        )
    }
    assert results["typo"].outcome == "failure"
    assert "last_seen" in (results["typo"].error or "")
    assert (results["worker_tokens"].outcome, results["worker_tokens"].rows) == ("success", 2)


# --- the worked example at size -------------------------------------------------------------

# 1,000 workspaces: 200 worker tokens each (2 in 100 stale: 4,000 in all, fewer than a
# batch: the steady state of a sweep every 10 minutes, not a first backlog), 100 machine
# tokens each (3 in 100 inactive and past the retention, 47 active and old, 50 inactive and
# young), one primary token and five restricted ones (one of them inactive), all old.
# 306,000 tokens.
LARGE_SEED = """
INSERT INTO token (external_id, key, active, token_type, workspace_id, created_at, updated_at)
SELECT gen_random_uuid(),
       CASE WHEN g % 100 < 2 THEN 'go-' ELSE 'stay-' END || 'worker-' || w || '-' || g,
       g % 3 <> 0, 'worker', w,
       now() - interval '120 days',
       CASE WHEN g % 100 < 2 THEN now() - interval '31 days' - (g % 60) * interval '1 day'
            ELSE now() - (g % 29) * interval '1 day' - interval '1 minute' END
FROM generate_series(1, 1000) w, generate_series(1, 200) g;
INSERT INTO token (external_id, key, active, token_type, workspace_id, created_at, updated_at)
SELECT gen_random_uuid(),
       CASE WHEN g % 100 < 3 THEN 'go-' ELSE 'stay-' END || 'machine-' || w || '-' || g,
       g % 100 BETWEEN 3 AND 49,
       'machine', w,
       CASE WHEN g % 100 < 50 THEN now() - interval '91 days' - (g % 600) * interval '1 day'
            ELSE now() - (g % 89) * interval '1 day' - interval '1 minute' END,
       now() - interval '200 days'
FROM generate_series(1, 1000) w, generate_series(1, 100) g;
INSERT INTO token (external_id, key, active, token_type, workspace_id, created_at, updated_at)
SELECT gen_random_uuid(), 'stay-' || t || '-' || w || '-' || g,
       NOT (t = 'restricted' AND g = 5), t, w,
       now() - interval '700 days', now() - interval '400 days'
FROM generate_series(1, 1000) w, generate_series(1, 5) g,
     unnest(ARRAY['workspace_primary', 'restricted']) t
WHERE t = 'restricted' OR g = 1;
ANALYZE token;
"""

COUNT_BY_FATE = """
SELECT count(*) FILTER (WHERE key LIKE 'go-%%') AS go,
       count(*) FILTER (WHERE key LIKE 'stay-%%') AS stay,
       count(*) FILTER (WHERE active AND token_type = 'workspace_primary') AS primary_active,
       count(*) FILTER (WHERE active AND token_type = 'restricted') AS restricted_active
FROM token
"""


def plan_of_index_batch(conn: psycopg.Connection[Any], settings: Settings, name: str) -> str:
    """The planner's plan (JSON text) for one index-served batch of sweep ``name``: the very
    statement the engine runs, composed by reaper.db, explained without running it."""
    sweep = {s.name: s for s in configured_sweeps(settings)}[name]
    stmts = SweepStatements(sweep.predicate)
    (param,) = sweep.cutoffs
    cutoff = conn.execute("SELECT now() - %s::interval", (sweep.retentions[param],)).fetchone()
    assert cutoff is not None
    row = conn.execute(
        sql.SQL("EXPLAIN (FORMAT JSON) ") + stmts.index_plan,
        {param: cutoff[0], "batch_size": sweep.batch_size},
    ).fetchone()
    assert row is not None
    return json.dumps(row[0])


@pytest.mark.slow
def test_the_token_example_on_306k_tokens(
    dsn: str,
    token_conn: psycopg.Connection[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make_settings: Callable[..., Settings],
) -> None:
    token_conn.execute(LARGE_SEED)
    go, stay, primary, restricted = token_conn.execute(COUNT_BY_FATE).fetchone() or ()
    assert (go, stay, primary, restricted) == (7_000, 299_000, 1_000, 4_000)
    settings = example_settings(dsn)

    # Each sweep's batch is served by its expression index, not the application's index
    # (workspace_id first) nor a scan of the table.
    worker_plan = plan_of_index_batch(token_conn, settings, "worker_tokens")
    machine_plan = plan_of_index_batch(token_conn, settings, "machine_tokens")
    assert "token_worker_refreshed_idx" in worker_plan, worker_plan
    assert "token_machine_retired_idx" in machine_plan, machine_plan
    assert "Seq Scan" not in worker_plan + machine_plan

    metrics_file = tmp_path / "reaper.prom"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(
            [
                "run-once",
                "--config",
                str(EXAMPLE_TOML),
                "--dsn",
                dsn,
                "--json",
                "--metrics-file",
                str(metrics_file),
            ]
        )
    assert exit_info.value.code == 0
    results = {r["sweep"]: r for r in json.loads(capsys.readouterr().out)}
    assert results["worker_tokens"]["rows"] == 4_000
    assert results["worker_tokens"]["strategy"] == "index"
    assert results["machine_tokens"]["rows"] == 3_000

    assert token_conn.execute(COUNT_BY_FATE).fetchone() == (0, 299_000, 1_000, 4_000)
    deleted = {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(metrics_file.read_text())
        for s in family.samples
        if s.name == "reaper_deleted_rows_total"
    }
    assert deleted == {"worker_stale": 4_000, "machine_inactive": 3_000}


def _one_sweep(dsn: str, table: str, **extra: Any) -> Settings:
    return build_settings(
        {"dsn": dsn, **extra},
        {
            "sweeps": {
                "events": {
                    "table": table,
                    "reason": "old",
                    "age": "created_at",
                    "retention": "30d",
                }
            }
        },
    )


@pytest.mark.parametrize("strategy", ["auto", "heap", "index"])
def test_a_partitioned_table_is_swept_through_its_partitions(
    dsn: str, conn: psycopg.Connection[Any], database: Database, strategy: str
) -> None:
    # The partitioned parent's own heap is empty: a heap walk over it would find nothing.
    conn.execute(
        """
        CREATE TABLE ev (id bigint, created_at timestamptz NOT NULL)
            PARTITION BY RANGE (created_at);
        CREATE TABLE ev_a PARTITION OF ev FOR VALUES FROM ('2000-01-01') TO ('2026-06-01');
        CREATE TABLE ev_b PARTITION OF ev FOR VALUES FROM ('2026-06-01') TO ('2200-01-01');
        CREATE INDEX ON ev (created_at);
        INSERT INTO ev SELECT g, now() - (g % 400) * interval '1 day' - interval '1 hour'
        FROM generate_series(1, 4000) g;
        ANALYZE ev;
        """
    )
    settings = _one_sweep(dsn, "public.ev", strategy=strategy, batch_size="500")
    (result,) = run_sweeps(database, enabled(settings, ["events"]), engine_options(settings))
    assert result.outcome == "success"
    old, young = (
        conn.execute(
            "SELECT count(*) FILTER (WHERE created_at < now() - interval '30 days'),"
            " count(*) FILTER (WHERE created_at >= now() - interval '30 days') FROM ev"
        ).fetchone()
        or ()
    )
    assert (old, young) == (0, 300)
    assert result.rows == 3700


def test_a_mixed_case_schema_qualified_table_is_the_one_swept(
    dsn: str, conn: psycopg.Connection[Any], database: Database
) -> None:
    # The catalog look-ups (table size, strategy) must name the same table as the DELETE.
    conn.execute(
        """
        CREATE SCHEMA "Audit";
        CREATE TABLE "Audit"."Events" (created_at timestamptz NOT NULL);
        CREATE TABLE audit_events_decoy (created_at timestamptz NOT NULL);
        INSERT INTO "Audit"."Events" SELECT now() - g * interval '1 day' + interval '1 hour'
        FROM generate_series(1, 100) g;
        ANALYZE "Audit"."Events";
        """
    )
    settings = _one_sweep(dsn, "Audit.Events", strategy="heap")
    (result,) = run_sweeps(database, enabled(settings, ["events"]), engine_options(settings))
    assert (result.outcome, result.strategy, result.rows) == ("success", "heap", 70)
    assert conn.execute('SELECT count(*) FROM "Audit"."Events"').fetchone() == (30,)

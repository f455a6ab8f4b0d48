"""A run ends, on a real PostgreSQL: a batch whose DELETE removes none of the rows it named
(a BEFORE DELETE trigger that returns NULL: a soft delete; row-level security whose DELETE
policy is narrower than its SELECT policy) stops the run at once, with one line that names
the cause, counted as a failure; the same causes are `reaper check` findings before any run,
and so is a policy that hides the rows from reaper's role."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
import structlog
from prometheus_client import CollectorRegistry

from reaper.commands import checks
from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import Settings, build_settings
from reaper.db import Database
from reaper.engine.result import SweepResult
from reaper.engine.run import run_sweep
from reaper.metrics import Metrics
from tests.support import enabled
from tests.support.checks import findings_of
from tests.support.ops import apply_grants, run_cli, run_json

STRATEGIES = pytest.mark.parametrize("strategy", ["heap", "index"])
STALE = "logged_at < now() - interval '30 days'"


def declared(dsn: str, **extra: Any) -> Settings:
    return build_settings(
        {"dsn": dsn, "busy_share": "1", **extra},
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


def seed(conn: psycopg.Connection[Any], stale: int = 3000, live: int = 100) -> None:
    conn.execute(
        "CREATE TABLE events (id bigint PRIMARY KEY, logged_at timestamptz NOT NULL,"
        " tenant text NOT NULL DEFAULT 'b', deleted_at timestamptz);"
        "CREATE INDEX ON events (logged_at);"
    )
    conn.execute(
        "INSERT INTO events (id, logged_at) SELECT g, now() - interval '60 days'"
        " FROM generate_series(1, %s::int) g",
        (stale,),
    )
    conn.execute(
        "INSERT INTO events (id, logged_at) SELECT g, now()"
        " FROM generate_series(%s::int + 1, %s::int + %s::int) g",
        (stale, stale, live),
    )
    conn.execute("ANALYZE events")


def sweep(settings: Settings) -> tuple[SweepResult, Metrics, list[dict[str, Any]]]:
    (s,) = enabled(settings, ["events"])
    metrics = Metrics([s], CollectorRegistry())
    with structlog.testing.capture_logs() as logs, Database(connection_settings(settings)) as db:
        result = run_sweep(db, s, engine_options(settings), metrics=metrics)
    return result, metrics, logs


def check(settings: Settings) -> list[checks.Finding]:
    with Database(connection_settings(settings)) as db:
        return [
            f
            for f in checks.run_checks(db, enabled(settings, ["events"]), settings)
            if f.check == "deletes"
        ]


def stale(conn: psycopg.Connection[Any]) -> int:
    return int(conn.execute(f"SELECT count(*) FROM events WHERE {STALE}").fetchone()[0])  # type: ignore[index]


def failures(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value(
        "reaper_sweep_runs_total", {"sweep": "events", "outcome": "failure"}
    )


def soft_delete(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "CREATE FUNCTION soft_delete() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN UPDATE public.events SET deleted_at = now() WHERE id = OLD.id;"
        " RETURN NULL; END $$;"
        "CREATE TRIGGER soft_delete BEFORE DELETE ON events FOR EACH ROW"
        " EXECUTE FUNCTION soft_delete();"
    )


@pytest.mark.fresh_db
@STRATEGIES
def test_a_soft_delete_trigger_stops_the_run_at_its_first_batch(
    dsn: str, conn: psycopg.Connection[Any], strategy: str
) -> None:
    seed(conn)
    soft_delete(conn)
    settings = declared(dsn, strategy=strategy, batch_size=500)
    result, metrics, logs = sweep(settings)
    assert result.outcome == "failure"
    assert result.error_type == "BatchStalled"
    assert result.error is not None and "\n" not in result.error
    named = re.search(r"named (\d+) rows and removed none", result.error)
    assert named is not None and 0 < int(named.group(1)) <= 500
    assert "BEFORE DELETE row trigger soft_delete on public.events" in result.error
    assert "return OLD" in result.error
    # One batch, not thousands: its rows were updated by the trigger once, and the run ended.
    assert result.batches == 1 and result.rows == 0
    assert stale(conn) == 3000
    updated = conn.execute("SELECT count(*) FROM events WHERE deleted_at IS NOT NULL").fetchone()
    assert updated == (int(named.group(1)),)
    assert failures(metrics) == 1
    (line,) = [e for e in logs if e["event"] == "sweep_failed"]
    assert line["error_type"] == "BatchStalled"
    # reaper check said so before any run.
    (finding,) = check(settings)
    assert (finding.status, finding.subject) == ("warn", "trigger soft_delete on events")


@pytest.mark.fresh_db
@pytest.mark.parametrize(
    ("delete_policy", "batches"),
    [
        # No DELETE policy at all: the role reads every row and may delete none.
        ("", 1),
        # A DELETE policy that reaches one row in ten: each batch removes a tenth of it.
        ("CREATE POLICY tenth ON events FOR DELETE TO reaper USING (id % 10 = 0);", 3),
    ],
    ids=["none", "narrower"],
)
def test_a_delete_policy_narrower_than_the_select_policy_stops_the_run(
    dsn: str, conn: psycopg.Connection[Any], delete_policy: str, batches: int
) -> None:
    seed(conn)
    reaper_dsn = apply_grants(dsn)
    conn.execute(
        "GRANT SELECT, DELETE ON events TO reaper;"
        "ALTER TABLE events ENABLE ROW LEVEL SECURITY;"
        "CREATE POLICY everything ON events FOR SELECT TO reaper USING (true);" + delete_policy
    )
    settings = declared(reaper_dsn, strategy="index", batch_size=500)
    (finding,) = check(settings)
    assert (finding.status, finding.subject) == ("fail", "row-level security on events")
    assert "BYPASSRLS" in (finding.fix or "")
    result, metrics, _ = sweep(settings)
    assert result.outcome == "failure" and result.error_type == "BatchStalled"
    assert result.error is not None
    assert "row-level security on public.events applies to role reaper" in result.error
    assert result.batches == batches
    assert stale(conn) >= 3000 - 50 * batches
    assert failures(metrics) == 1


@pytest.mark.fresh_db
def test_a_policy_that_hides_the_rows_is_a_check_failure(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    seed(conn)
    reaper_dsn = apply_grants(dsn)
    conn.execute(
        "GRANT SELECT, DELETE ON events TO reaper;"
        "ALTER TABLE events ENABLE ROW LEVEL SECURITY;"
        "CREATE POLICY tenant ON events TO reaper USING (tenant = 'a');"
    )
    settings = declared(reaper_dsn, strategy="index", batch_size=500)
    # The run cannot see the rows: it deletes nothing and says success ...
    result, _, _ = sweep(settings)
    assert (result.outcome, result.rows) == ("success", 0)
    assert stale(conn) == 3000
    # ... and reaper check is not silent about it.
    (finding,) = check(settings)
    assert finding.status == "fail"
    assert "hides rows of events from role reaper: it reads about 0 of about 3,100" in (
        finding.detail
    )
    # With BYPASSRLS (or a policy that shows every row), the rows go.
    conn.execute("CREATE POLICY reaper_all ON events TO reaper USING (true)")
    (finding,) = check(settings)
    assert finding.status == "pass"
    result, _, _ = sweep(settings)
    assert (result.outcome, result.rows) == ("success", 3000)


@pytest.mark.fresh_db
def test_a_table_without_obstacles_passes_the_check(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    seed(conn)
    # A trigger after the delete, or one before an update, keeps no row.
    conn.execute(
        "CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;"
        "CREATE TRIGGER audit AFTER DELETE ON events FOR EACH ROW EXECUTE FUNCTION noop();"
        "CREATE TRIGGER touch BEFORE UPDATE ON events FOR EACH ROW EXECUTE FUNCTION noop();"
        "CREATE TRIGGER off BEFORE DELETE ON events FOR EACH ROW EXECUTE FUNCTION noop();"
        "ALTER TABLE events DISABLE TRIGGER off;"
    )
    settings = declared(dsn, strategy="heap")
    (finding,) = check(settings)
    assert finding.status == "pass"
    result, _, _ = sweep(settings)
    assert (result.outcome, result.rows) == ("success", 3000)


@pytest.mark.fresh_db
def test_run_once_fails_with_the_cause_and_check_warns_first(
    dsn: str,
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    seed(conn)
    soft_delete(conn)
    config = tmp_path / "reaper.toml"
    config.write_text(
        '[sweeps.events]\ntable = "public.events"\nreason = "old"\nage = "logged_at"\n'
        'retention = "30d"\nmax_eligible_fraction = "1"\nstrategy = "index"\n'
    )
    common = ("--dsn", dsn, "--config", str(config), "--sweep", "events")
    code, doc = run_json(capsys, "check", *common)
    (finding,) = findings_of(doc, check="deletes")
    assert finding["status"] == "warn" and "soft_delete" in finding["subject"]
    code, out, err = run_cli(capsys, "run-once", *common, "--busy-share", "1")
    assert code == 1
    assert "BEFORE DELETE row trigger soft_delete on public.events" in out + err
    assert stale(conn) == 3000

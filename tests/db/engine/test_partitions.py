"""Partition retention on a real PostgreSQL: partitions whose bounds prove every row past the
cutoff are dropped whole, the rest is swept row by row, and nothing the retention keeps goes.

Row keys say what must happen: ``go-*`` rows must be gone afterwards, ``stay-*`` rows must
survive. The clock is pinned (``now=NOW``) so every cutoff is exact.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import psycopg.conninfo
import pytest
import structlog
from prometheus_client import CollectorRegistry

from reaper.commands import checks
from reaper.config.connection import connection_settings
from reaper.config.engine import engine_options
from reaper.config.settings import Settings, build_settings
from reaper.config.sweeps import Sweep, configured_sweeps
from reaper.db import Database
from reaper.engine import retire
from reaper.engine.result import SweepResult
from reaper.engine.run import run_sweep
from reaper.errors import ConfigError
from reaper.metrics import Metrics
from tests.support import NOW, login_as, sweeps_of
from tests.support.partitions import (
    MICROSECOND,
    STRADDLE,
    STRADDLE_CUTOFF,
    add,
    create_events,
    events_settings,
    keys,
    month,
    partitions,
    seed,
)

# 182 days and 12 hours before NOW (2026-06-01 12:00 UTC): exactly 2025-12-01 00:00 UTC, the
# upper bound of the November partition.
ON_BOUND = "182d12h"
ON_BOUND_CUTOFF = datetime(2025, 12, 1, tzinfo=UTC)
# 180 days: 2025-12-03 12:00 UTC, inside the December partition (the boundary).


def table_exists(conn: psycopg.Connection[Any], name: str) -> bool:
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone() == (True,)


@pytest.fixture
def db(dsn: str) -> Iterator[Database]:
    settings = build_settings({"dsn": dsn})
    with Database(connection_settings(settings)) as database:
        yield database


def sweep_once(
    db: Database,
    settings: Settings,
    sweep: Sweep,
    registry: CollectorRegistry | None = None,
    **kwargs: Any,
) -> tuple[SweepResult, Metrics]:
    metrics = Metrics([sweep], registry or CollectorRegistry())
    result = run_sweep(db, sweep, engine_options(settings), metrics=metrics, now=NOW, **kwargs)
    assert result.outcome == "success", result.error
    return result, metrics


def counter(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


# -- the proof: pure, no database ----------------------------------------------------------


# -- dropping -------------------------------------------------------------------------------


@pytest.mark.fresh_db
def test_partitions_past_the_cutoff_are_dropped_and_the_boundary_swept_by_rows(
    dsn: str, conn: psycopg.Connection[Any], db: Database
) -> None:
    create_events(conn)
    seed(conn, STRADDLE_CUTOFF)
    before = keys(conn)
    settings, sweep = events_settings(dsn, batch_size=2)
    with structlog.testing.capture_logs() as logs:
        result, metrics = sweep_once(db, settings, sweep)

    assert keys(conn) == {k for k in before if k.startswith("stay-")}
    dropped = {f"events_2025_{m:02d}" for m in range(6, 12)}
    assert not partitions(conn) & dropped
    assert not any(table_exists(conn, t) for t in dropped)
    # The boundary (December) is row-swept, never dropped; so is the DEFAULT partition.
    assert {"events_2025_12", "events_default", "events_2026_01"} <= partitions(conn)
    gone = len(before) - len(keys(conn))
    assert result.rows == gone
    assert counter(metrics, "reaper_deleted_rows_total", table="events", reason="expired") == gone
    assert counter(metrics, "reaper_dropped_partitions_total", table="events") == 6
    lines = [e for e in logs if e["event"] == "partition_dropped"]
    assert sorted(e["partition"] for e in lines) == sorted(f"public.{t}" for t in dropped)
    assert all(e["rows"] == 5 and e["rows_source"] == "count" for e in lines)
    assert {p["partition"] for p in result.partitions} == {f"public.{t}" for t in dropped}


@pytest.mark.fresh_db
def test_upper_bound_equal_to_the_cutoff_drops_a_microsecond_past_does_not(
    dsn: str, conn: psycopg.Connection[Any], db: Database
) -> None:
    create_events(conn, months=[month(2025, 10)], default=False)
    conn.execute(
        "CREATE TABLE events_upto_cutoff PARTITION OF events "
        "FOR VALUES FROM ('2025-11-01 00:00:00+00') TO ('2025-12-01 00:00:00+00')"
    )
    conn.execute(
        "CREATE TABLE events_one_microsecond PARTITION OF events "
        "FOR VALUES FROM ('2025-12-01 00:00:00+00') TO ('2025-12-01 00:00:00.000001+00')"
    )
    conn.execute(
        "CREATE TABLE events_later PARTITION OF events "
        "FOR VALUES FROM ('2025-12-01 00:00:00.000001+00') TO ('2026-01-01 00:00:00+00')"
    )
    add(conn, "go-last-microsecond", ON_BOUND_CUTOFF - MICROSECOND)
    add(conn, "stay-on-cutoff", ON_BOUND_CUTOFF)
    add(conn, "stay-just-after", ON_BOUND_CUTOFF + MICROSECOND)
    add(conn, "go-october", datetime(2025, 10, 5, tzinfo=UTC))
    settings, sweep = events_settings(dsn, retention=ON_BOUND)
    result, _ = sweep_once(db, settings, sweep)
    assert partitions(conn) == {"events_one_microsecond", "events_later"}
    assert keys(conn) == {"stay-on-cutoff", "stay-just-after"}
    assert result.rows == 2


@pytest.mark.fresh_db
@pytest.mark.parametrize(
    ("rules", "extra"),
    [
        # The second rule (a status, a shorter cutoff) deletes a new failed row; an OR of rules
        # proves nothing.
        (
            [
                {"age": "created_at", "retention": STRADDLE},
                {"age": "created_at", "where": {"status": "failed"}, "retention": "30d"},
            ],
            [("go-new-failed", datetime(2026, 5, 1, tzinfo=UTC), "failed")],
        ),
        # The filter keeps an old pending row, in a partition wholly past the cutoff.
        (
            [{"age": "created_at", "where": {"status": "done"}, "retention": STRADDLE}],
            [("stay-old-pending", datetime(2025, 7, 1, tzinfo=UTC), "pending")],
        ),
    ],
)
def test_a_predicate_with_other_conditions_never_drops(
    dsn: str,
    conn: psycopg.Connection[Any],
    db: Database,
    rules: list[dict[str, Any]],
    extra: list[tuple[str, datetime, str]],
) -> None:
    create_events(conn)
    seed(conn, STRADDLE_CUTOFF)
    for key, at, status in extra:
        add(conn, key, at, status)
    expected = {k for k in keys(conn) if k.startswith("stay-")}
    before_partitions = partitions(conn)
    settings, sweep = events_settings(dsn, rules=rules)
    result, metrics = sweep_once(db, settings, sweep)
    assert partitions(conn) == before_partitions
    assert result.partitions == []
    assert counter(metrics, "reaper_dropped_partitions_total", table="events") == 0
    assert keys(conn) == expected


@pytest.mark.fresh_db
def test_off_never_drops_and_detach_keeps_the_table(
    dsn: str, conn: psycopg.Connection[Any], db: Database
) -> None:
    create_events(conn)
    seed(conn, STRADDLE_CUTOFF)
    expected = {k for k in keys(conn) if k.startswith("stay-")}
    settings, sweep = events_settings(dsn, partition_action="off")
    before = partitions(conn)
    sweep_once(db, settings, sweep)
    assert partitions(conn) == before
    assert keys(conn) == expected

    conn.execute("TRUNCATE events")
    seed(conn, STRADDLE_CUTOFF)
    settings, sweep = events_settings(dsn, partition_action="detach")
    result, metrics = sweep_once(db, settings, sweep)
    assert keys(conn) == expected
    assert "events_2025_06" not in partitions(conn)
    # Detached, not dropped: the rows are kept in a table of their own, for an archive job.
    assert conn.execute("SELECT count(*) FROM events_2025_06").fetchone() == (5,)
    assert counter(metrics, "reaper_dropped_partitions_total", table="events") == 6
    assert {p["action"] for p in result.partitions} == {"detach"}


@pytest.mark.fresh_db
def test_a_sweep_of_its_own_chooses_its_partition_action(
    dsn: str, conn: psycopg.Connection[Any], db: Database
) -> None:
    create_events(conn)
    seed(conn, STRADDLE_CUTOFF)
    before = partitions(conn)
    settings, sweep = events_settings(
        dsn, sweep_values={"partition_action": "off"}, partition_action="drop"
    )
    assert sweep.partition_action == "off"
    assert sweeps_of(settings)["nodes_silent"].partition_action == "drop"
    sweep_once(db, settings, sweep)
    assert partitions(conn) == before
    assert all(k.startswith("stay-") for k in keys(conn))
    with pytest.raises(ConfigError, match="partition_action"):
        events_settings(dsn, sweep_values={"partition_action": "truncate"})


@pytest.mark.fresh_db
def test_drops_that_would_empty_the_table_wait_for_an_explicit_opt_in(
    dsn: str, conn: psycopg.Connection[Any], db: Database
) -> None:
    create_events(conn, months=[month(2025, 6), month(2026, 5)], default=False)
    conn.execute(
        "INSERT INTO events (key, created_at) SELECT 'go-' || i, "
        "'2025-06-10 00:00+00' FROM generate_series(1, 5000) AS i"
    )
    add(conn, "stay-recent", datetime(2026, 5, 20, tzinfo=UTC))
    conn.execute("ANALYZE events")
    settings, sweep = events_settings(dsn)
    with structlog.testing.capture_logs() as logs:
        dry = run_sweep(db, sweep, engine_options(settings), now=NOW, dry_run=True)
    assert dry.partitions == []
    refused = [e for e in logs if e["event"] == "partition_drop_refused"]
    assert refused and "max_eligible_fraction" in refused[0]["reason"]
    # A real run stops before its first drop or delete.
    result = run_sweep(db, sweep, engine_options(settings), now=NOW)
    assert result.outcome == "refused" and "max_eligible_fraction" in (result.error or "")
    assert "events_2025_06" in partitions(conn)
    assert result.partitions == []

    settings, sweep = events_settings(dsn, sweep_values={"max_eligible_fraction": 1})
    conn.execute(
        "INSERT INTO events (key, created_at) SELECT 'go-' || i, "
        "'2025-06-10 00:00+00' FROM generate_series(1, 5000) AS i"
    )
    result, _ = sweep_once(db, settings, sweep)
    assert "events_2025_06" not in partitions(conn)
    assert keys(conn) == {"stay-recent"}


@pytest.mark.fresh_db
def test_the_default_partition_is_never_dropped(
    dsn: str, conn: psycopg.Connection[Any], db: Database
) -> None:
    # Only a DEFAULT partition, holding nothing but rows long past the cutoff.
    conn.execute(
        "CREATE TABLE events (key text, status text, created_at timestamptz) "
        "PARTITION BY RANGE (created_at)"
    )
    conn.execute("CREATE TABLE events_default PARTITION OF events DEFAULT")
    add(conn, "go-old", datetime(2020, 1, 1, tzinfo=UTC))
    conn.execute("INSERT INTO events VALUES ('stay-null', 'done', NULL)")
    settings, sweep = events_settings(dsn)
    sweep_once(db, settings, sweep)
    assert partitions(conn) == {"events_default"}
    assert keys(conn) == {"stay-null"}


@pytest.mark.fresh_db
def test_sub_partitions_on_the_same_column_are_judged_level_by_level(
    dsn: str, conn: psycopg.Connection[Any], db: Database
) -> None:
    conn.execute(
        "CREATE TABLE events (key text, status text, created_at timestamptz) "
        "PARTITION BY RANGE (created_at)"
    )
    # 2024 whole; 2025 by month (the boundary month December, 3 Dec); 2026 by status.
    conn.execute(
        "CREATE TABLE events_2024 PARTITION OF events FOR VALUES FROM "
        "('2024-01-01 00:00+00') TO ('2025-01-01 00:00+00') "
        "PARTITION BY RANGE (created_at)"
    )
    conn.execute(
        "CREATE TABLE events_2024_h1 PARTITION OF events_2024 FOR VALUES FROM "
        "('2024-01-01 00:00+00') TO ('2024-07-01 00:00+00')"
    )
    conn.execute(
        "CREATE TABLE events_2024_h2 PARTITION OF events_2024 FOR VALUES FROM "
        "('2024-07-01 00:00+00') TO ('2025-01-01 00:00+00')"
    )
    conn.execute(
        "CREATE TABLE events_2025 PARTITION OF events FOR VALUES FROM "
        "('2025-01-01 00:00+00') TO ('2026-01-01 00:00+00') "
        "PARTITION BY RANGE (created_at)"
    )
    for m in range(1, 13):
        start, end = month(2025, m), month(2025, m + 1)
        conn.execute(
            f"CREATE TABLE events_2025_{m:02d} PARTITION OF events_2025 FOR VALUES "
            f"FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
        )
    conn.execute(
        "CREATE TABLE events_2026 PARTITION OF events FOR VALUES FROM "
        "('2026-01-01 00:00+00') TO ('2027-01-01 00:00+00') PARTITION BY LIST (status)"
    )
    conn.execute("CREATE TABLE events_2026_all PARTITION OF events_2026 DEFAULT")
    for at in (
        datetime(2024, 3, 1, tzinfo=UTC),
        datetime(2024, 9, 1, tzinfo=UTC),
        datetime(2025, 4, 1, tzinfo=UTC),
        datetime(2025, 12, 2, tzinfo=UTC),
        datetime(2025, 12, 5, tzinfo=UTC),
        datetime(2026, 2, 1, tzinfo=UTC),
    ):
        add(conn, f"{'go' if at < STRADDLE_CUTOFF else 'stay'}-{at:%Y%m%d}", at)
    settings, sweep = events_settings(dsn)
    result, metrics = sweep_once(db, settings, sweep)
    assert keys(conn) == {"stay-20251205", "stay-20260201"}
    assert partitions(conn) == {"events_2025", "events_2026"}
    assert partitions(conn, "events_2025") == {"events_2025_12"}
    assert not table_exists(conn, "events_2024_h1")
    # events_2024 goes whole (its children with it), then eleven months of 2025.
    assert counter(metrics, "reaper_dropped_partitions_total", table="events") == 12
    assert result.rows == 4


@pytest.mark.fresh_db
def test_timestamp_keys_outside_utc_keep_the_spring_forward_gap(
    dsn: str, conn: psycopg.Connection[Any], db: Database
) -> None:
    # A timestamp (no time zone) key, read in New York: local times are converted at
    # the session's offset, and 02:30 on 8 March 2026 (inside the spring-forward gap) becomes
    # 07:30 UTC, later than 03:00 local (07:00 UTC). With the cutoff at 07:00 UTC, the
    # partition [.., 03:00 local) holds a row that the retention keeps.
    conn.execute(
        "CREATE TABLE events (key text, created_at timestamp) PARTITION BY RANGE (created_at)"
    )
    conn.execute(
        "CREATE TABLE events_early PARTITION OF events FOR VALUES FROM "
        "('2026-02-01 00:00') TO ('2026-03-01 00:00')"
    )
    conn.execute(
        "CREATE TABLE events_gap PARTITION OF events FOR VALUES FROM "
        "('2026-03-01 00:00') TO ('2026-03-08 03:00')"
    )
    conn.execute("CREATE TABLE events_late PARTITION OF events DEFAULT")
    conn.execute(
        "INSERT INTO events VALUES ('go-feb', '2026-02-10 00:00'), "
        "('go-mar', '2026-03-05 00:00'), ('stay-in-gap', '2026-03-08 02:30'), "
        "('stay-late', '2026-03-09 00:00')"
    )
    cutoff = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
    settings, sweep = events_settings(dsn, retention="1d", timestamp_time_zone="America/New_York")
    metrics = Metrics([sweep], CollectorRegistry())
    with Database(connection_settings(settings)) as fresh:
        result = run_sweep(
            fresh, sweep, engine_options(settings), metrics=metrics, now=cutoff + timedelta(days=1)
        )
    assert result.outcome == "success", result.error
    assert keys(conn) == {"stay-in-gap", "stay-late"}
    assert "events_gap" in partitions(conn)
    assert "events_early" not in partitions(conn)


@pytest.mark.fresh_db
@pytest.mark.parametrize(
    ("column_type", "timezone", "dropped"),
    [
        # In UTC a timestamp or date converts to the same instant: the bound is exact.
        ("timestamp", "UTC", True),
        ("date", "Etc/UTC", True),
        ("timestamptz", "Asia/Tokyo", True),
        # Elsewhere the conversion depends on the zone's offsets: a bound on the cutoff itself
        # proves nothing (the rows are swept in batches instead).
        ("timestamp", "Asia/Tokyo", False),
        ("date", "America/New_York", False),
    ],
)
def test_a_bound_on_the_cutoff_is_exact_where_the_key_converts_exactly(
    dsn: str, conn: psycopg.Connection[Any], column_type: str, timezone: str, dropped: bool
) -> None:
    conn.execute(
        f"CREATE TABLE events (key text, created_at {column_type}) PARTITION BY RANGE (created_at)"
    )
    # The November partition's upper bound is the cutoff (2025-12-01 00:00) in the key's
    # own terms: UTC for timestamptz, the local date or time otherwise.
    conn.execute(
        "CREATE TABLE events_nov PARTITION OF events FOR VALUES FROM "
        "('2025-11-01 00:00+00') TO ('2025-12-01 00:00+00')"
        if column_type == "timestamptz"
        else "CREATE TABLE events_nov PARTITION OF events FOR VALUES FROM "
        "('2025-11-01') TO ('2025-12-01')"
    )
    conn.execute("CREATE TABLE events_rest PARTITION OF events DEFAULT")
    conn.execute("INSERT INTO events VALUES ('nov', '2025-11-15'), ('dec', '2025-12-15')")
    settings, sweep = events_settings(dsn, retention="1d", timestamp_time_zone=timezone)
    with Database(connection_settings(settings)) as fresh:
        result = run_sweep(
            fresh, sweep, engine_options(settings), now=ON_BOUND_CUTOFF + timedelta(days=1)
        )
    assert result.outcome == "success", result.error
    assert ("events_nov" not in partitions(conn)) is dropped
    assert keys(conn) == {"dec"}


OBSTACLES = {
    "trigger events_audit": [
        "CREATE TABLE audit (n int)",
        "CREATE FUNCTION audit_delete() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN INSERT INTO public.audit VALUES (1); RETURN OLD; END $$",
        "CREATE TRIGGER events_audit AFTER DELETE ON events "
        "FOR EACH ROW EXECUTE FUNCTION audit_delete()",
    ],
    "foreign key": [
        "ALTER TABLE events ADD PRIMARY KEY (id, created_at)",
        "CREATE TABLE refs (event_id bigint, event_at timestamptz, FOREIGN KEY "
        "(event_id, event_at) REFERENCES events (id, created_at) ON DELETE CASCADE)",
        "INSERT INTO refs SELECT id, created_at FROM events WHERE key LIKE 'go-2025%%'",
    ],
    "row-level security": [
        "ALTER TABLE events_2025_07 ENABLE ROW LEVEL SECURITY",
    ],
    "publication": [
        "DO $$ DECLARE r record; BEGIN FOR r IN SELECT inhrelid::regclass AS t "
        "FROM pg_inherits WHERE inhparent = 'events'::regclass LOOP "
        "EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', r.t); END LOOP; END $$",
        "CREATE PUBLICATION events_pub FOR TABLE events",
    ],
}


@pytest.mark.fresh_db
@pytest.mark.parametrize("obstacle", list(OBSTACLES))
def test_what_would_make_a_drop_differ_from_the_deletes_keeps_every_partition(
    dsn: str, conn: psycopg.Connection[Any], db: Database, obstacle: str
) -> None:
    create_events(conn)
    seed(conn, STRADDLE_CUTOFF)
    for stmt in OBSTACLES[obstacle]:
        conn.execute(stmt)
    before = partitions(conn)
    settings, sweep = events_settings(dsn)
    with structlog.testing.capture_logs() as logs:
        result, metrics = sweep_once(db, settings, sweep)
    assert partitions(conn) == before
    assert all(k.startswith("stay-") for k in keys(conn))
    assert counter(metrics, "reaper_dropped_partitions_total", table="events") == 0
    refused = [e for e in logs if e["event"] == "partition_drop_refused"]
    assert refused and obstacle in refused[0]["reason"]
    if obstacle.startswith("trigger"):
        # The trigger fired once per deleted row: what dropping would have skipped.
        assert conn.execute("SELECT count(*) FROM audit").fetchone() == (result.rows,)
    if obstacle == "foreign key":
        # The deletes cascaded: a detach would have failed or left the references dangling.
        assert conn.execute("SELECT count(*) FROM refs").fetchone() == (0,)
    findings = [
        f for f in checks.run_checks(db, [sweep], settings, now=NOW) if f.check == "partitions"
    ]
    assert [f.status for f in findings] == ["warn"]


@pytest.mark.fresh_db
def test_a_role_that_does_not_own_the_table_never_drops_and_check_fails(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    create_events(conn)
    seed(conn, STRADDLE_CUTOFF)
    role = f"reaper_part_{conn.info.backend_pid}"
    conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        conn.execute(f"GRANT SELECT, DELETE, UPDATE ON ALL TABLES IN SCHEMA public TO {role}")
        role_dsn = login_as(dsn, role)
        settings, sweep = events_settings(role_dsn)
        before = partitions(conn)
        with Database(connection_settings(settings)) as db:
            findings = checks.run_checks(db, [sweep], settings, now=NOW)
            with structlog.testing.capture_logs() as logs:
                sweep_once(db, settings, sweep)
        assert partitions(conn) == before
        assert all(k.startswith("stay-") for k in keys(conn))
        assert any(e["event"] == "partition_drop_refused" for e in logs)
        found = [f for f in findings if f.check == "partitions"]
        assert [f.status for f in found] == ["fail"]
        assert "does not own" in found[0].detail
    finally:
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE {role}")


@pytest.mark.fresh_db
def test_an_interrupted_detach_is_reported_and_finished_by_the_next_run(
    dsn: str, conn: psycopg.Connection[Any], db: Database
) -> None:
    create_events(conn, default=False)
    seed(conn, STRADDLE_CUTOFF, default=False)
    expected = {k for k in keys(conn) if k.startswith("stay-")}
    # A reader's open snapshot makes the second half of DETACH CONCURRENTLY wait; it gives
    # up at lock_timeout and leaves events_2025_06 detach-pending.
    with psycopg.connect(dsn) as reader, psycopg.connect(dsn, autocommit=True) as detacher:
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM events").fetchone()
        detacher.execute("SET lock_timeout = '200ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            detacher.execute("ALTER TABLE events DETACH PARTITION events_2025_06 CONCURRENTLY")
        reader.rollback()
    pending = conn.execute(
        "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhdetachpending"
    ).fetchall()
    assert pending == [("events_2025_06",)]

    settings, sweep = events_settings(dsn)
    findings = [
        f for f in checks.run_checks(db, [sweep], settings, now=NOW) if f.check == "partitions"
    ]
    assert any(f.status == "fail" and "FINALIZE" in (f.fix or "") for f in findings)

    with structlog.testing.capture_logs() as logs:
        result, metrics = sweep_once(db, settings, sweep)
    assert conn.execute("SELECT count(*) FROM pg_inherits WHERE inhdetachpending").fetchone() == (
        0,
    )
    assert not table_exists(conn, "events_2025_06")
    assert keys(conn) == expected
    assert any(e["event"] == "partition_detach_finalized" for e in logs)
    assert counter(metrics, "reaper_dropped_partitions_total", table="events") == 6
    after = [
        f for f in checks.run_checks(db, [sweep], settings, now=NOW) if f.check == "partitions"
    ]
    assert all(f.status == "pass" for f in after)
    assert result.rows == 5 * 6 + 3  # six months dropped, three December rows swept


@pytest.mark.fresh_db
def test_writers_inserting_into_the_boundary_partition_during_the_sweep_lose_nothing(
    dsn: str, conn: psycopg.Connection[Any], db: Database
) -> None:
    create_events(conn)
    seed(conn, STRADDLE_CUTOFF)
    expected = {k for k in keys(conn) if k.startswith("stay-")}
    stop = threading.Event()
    inserted: list[str] = []
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as w:
                n = 0
                while not stop.is_set():
                    key = f"stay-writer-{n}"
                    # The boundary partition, after the cutoff: always kept.
                    add(w, key, STRADDLE_CUTOFF + timedelta(seconds=n + 1))
                    inserted.append(key)
                    writing.set()
                    n += 1
        except BaseException as exc:  # reported below
            failures.append(exc)
            writing.set()

    def on_batch(_result: SweepResult) -> None:
        add(conn, f"stay-batch-{_result.batches}", STRADDLE_CUTOFF + MICROSECOND)

    writing = threading.Event()
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        # The writer is inserting before the sweep starts, however slow its connection.
        writing.wait(timeout=30)
        settings, sweep = events_settings(dsn, batch_size=1)
        result, _ = sweep_once(db, settings, sweep, on_batch=on_batch)
    finally:
        stop.set()
        thread.join()
    assert not failures
    assert inserted
    assert len(result.partitions) == 6
    remaining = keys(conn)
    assert expected | set(inserted) <= remaining
    assert all(k.startswith("stay-") for k in remaining)


def test_metrics_start_at_zero_for_every_declared_table(dsn: str) -> None:
    settings, _ = events_settings(dsn)
    metrics = Metrics(configured_sweeps(settings), CollectorRegistry())
    for table in ("events", "nodes", "routers"):
        assert counter(metrics, "reaper_dropped_partitions_total", table=table) == 0


@pytest.mark.fresh_db
def test_a_large_partition_reports_the_catalog_estimate(
    dsn: str, conn: psycopg.Connection[Any], db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every partition counts as large: its rows are the catalog's estimate (exact after the
    # ANALYZE of seed()), not a scan of the whole partition.
    monkeypatch.setattr(retire, "EXACT_COUNT_MAX_BYTES", 0)
    create_events(conn)
    seed(conn, STRADDLE_CUTOFF)
    settings, sweep = events_settings(dsn)
    with structlog.testing.capture_logs() as logs:
        result, metrics = sweep_once(db, settings, sweep)
    lines = [e for e in logs if e["event"] == "partition_dropped"]
    assert len(lines) == 6
    assert all(e["rows_source"] == "estimate" and e["rows"] == 5 for e in lines)
    assert (
        counter(metrics, "reaper_deleted_rows_total", table="events", reason="expired")
        == result.rows
    )

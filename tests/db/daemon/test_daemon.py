"""`reaper run` in-process: the scheduler, budgets, backoff, locks, HTTP, gauges, outages.

Every test runs the real Daemon against a real PostgreSQL with short intervals, and waits on
what a user observes (rows gone, metric values, HTTP answers), never on a fixed sleep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from reaper.config.settings import Settings
from reaper.config.sweeps import by_name
from reaper.daemon.scheduler import Daemon
from reaper.db import advisory_lock_key
from tests.support import BUILTIN_SWEEPS, sweeps_of
from tests.support.daemon import (
    count,
    http_get,
    metric_samples,
    scalar,
    seed_routers,
    wait_for,
)

SWEEPS = by_name(BUILTIN_SWEEPS)
QUIET = {"interval": "1h", "jitter": "0", "listen": "127.0.0.1:0", "gauge_interval": "1h"}


@pytest.fixture
def make_daemon(
    make_settings: Callable[..., Settings],
) -> Iterator[Callable[..., Daemon]]:
    """``make_daemon(sweeps=[...], **settings)``: a Daemon on the test database with a fresh
    registry, port picked by the OS; stopped after the test."""
    made: list[Daemon] = []

    def make(sweeps: list[str] | None = None, start: bool = True, **values: Any) -> Daemon:
        settings = make_settings(**{**QUIET, **values})
        configured = sweeps_of(settings)
        chosen = [configured[n] for n in sweeps] if sweeps else list(configured.values())
        daemon = Daemon(settings, chosen, registry=CollectorRegistry())
        made.append(daemon)
        if start:
            daemon.start()
        return daemon

    yield make
    for d in made:
        d.stop(timedelta(seconds=5))


def value(daemon: Daemon, name: str, **labels: str) -> float:
    v = daemon.metrics.registry.get_sample_value(name, labels)
    return 0.0 if v is None else v


def test_schedules_fire_and_delete_the_garbage(make_daemon, conn) -> None:
    seed_routers(conn, garbage=7, keep=3)
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at, expires_at) VALUES "
        "('garbage-s1', now() - interval '9 days', now() - interval '4 days'),"
        "('keep-s1', now(), now() + interval '1 day'),"
        "('keep-banned', now() - interval '9 days', now() - interval '5 days')"
    )
    conn.execute("UPDATE nodes SET banned = true WHERE peer_id = 'keep-banned'")
    daemon = make_daemon(["nodes_session", "router_leases"], interval="200ms")
    # Several runs of each: the schedule fires again and again, not just at start.
    wait_for(
        "3 runs of each sweep",
        lambda: all(
            value(daemon, "reaper_sweep_runs_total", sweep=s, outcome="success") >= 3
            for s in ("nodes_session", "router_leases")
        ),
    )
    assert count(conn, "routers", "router_id", "garbage-%") == 0
    assert count(conn, "routers", "router_id", "keep-%") == 3
    assert count(conn, "nodes", "peer_id", "garbage-%") == 0
    assert count(conn, "nodes", "peer_id", "keep-%") == 2
    assert value(daemon, "reaper_deleted_rows_total", table="routers", reason="expired") == 7
    assert value(daemon, "reaper_deleted_rows_total", table="nodes", reason="session") == 1
    assert value(daemon, "reaper_sweep_runs_total", sweep="router_leases", outcome="failure") == 0
    last = value(daemon, "reaper_sweep_last_success_timestamp_seconds", sweep="router_leases")
    assert abs(last - datetime.now(UTC).timestamp()) < 3600
    assert value(daemon, "reaper_batch_duration_seconds_count", sweep="router_leases") >= 3
    assert value(daemon, "reaper_sweep_duration_seconds_count", sweep="router_leases") >= 3


def test_jitter_stays_within_bounds(make_daemon) -> None:
    started = datetime.now(UTC)
    daemon = make_daemon(interval="10s", jitter="0.5")
    sweep = daemon.sweeps["router_leases"]
    assert daemon.jitter_seconds(sweep) == 5.0
    # The first run of every sweep comes within one jitter of the start. A sweep whose first
    # run has already fired (a delay near 0 on a slow machine) shows its second run instead,
    # which comes at least one interval after the start.
    firsts = [daemon.next_run_time(name) for name in SWEEPS]
    read_at = datetime.now(UTC)
    for first in firsts:
        assert first is not None
        assert started <= first
        assert first <= read_at + timedelta(seconds=5) or first >= started + timedelta(seconds=10)
    # ... and each next run between interval and interval + jitter after the last one.
    trigger = daemon._trigger(sweep)
    previous = datetime(2026, 1, 1, tzinfo=UTC)
    nexts = [trigger.get_next_fire_time(previous, previous) for _ in range(200)]
    offsets = [(n - previous).total_seconds() for n in nexts]
    assert all(10.0 <= o <= 15.0 for o in offsets)
    assert len({round(o, 3) for o in offsets}) > 100, "the delays are random"
    # No jitter: exactly the interval.
    assert make_daemon(interval="10s", jitter="0").jitter_seconds(sweep) == 0.0


def test_the_intervals_come_from_the_sweep_the_flag_and_the_file(make_settings) -> None:
    from reaper.config.settings import build_settings

    defaults = sweeps_of(make_settings())
    assert defaults["nodes_ephemeral"].interval == timedelta(minutes=5)
    assert defaults["nodes_silent"].interval == timedelta(hours=1)
    s = sweeps_of(
        build_settings({"interval": "10m"}, {"sweeps": {"router_leases": {"interval": "2m"}}})
    )
    assert s["router_leases"].interval == timedelta(minutes=2)
    assert s["nodes_silent"].interval == timedelta(minutes=10)


@pytest.mark.fresh_db
def test_a_failing_sweep_backs_off_and_the_others_keep_their_schedule(make_daemon, conn) -> None:
    seed_routers(conn, garbage=2)
    conn.execute("ALTER TABLE routers RENAME TO routers_away")
    daemon = make_daemon(
        ["router_leases", "nodes_session"], failure_backoff="100ms", max_failure_backoff="400ms"
    )
    # The interval is an hour: only the backoff brings the retries this soon.
    wait_for("4 failures", lambda: daemon.state("router_leases").failures >= 4)
    state = daemon.state("router_leases")
    assert state.next_delay == pytest.approx(0.4)  # capped (jitter 0)
    assert state.last is not None and "routers" in (state.last.error or "")
    failures = value(daemon, "reaper_sweep_runs_total", sweep="router_leases", outcome="failure")
    assert failures >= 4
    # The other sweep ran once at start (it may finish after the 4 failures on a busy
    # machine), and is next due an hour later.
    wait_for(
        "the other sweep's run",
        lambda: (
            value(daemon, "reaper_sweep_runs_total", sweep="nodes_session", outcome="success") >= 1
        ),
    )
    assert value(daemon, "reaper_sweep_runs_total", sweep="nodes_session", outcome="success") == 1
    nxt = daemon.next_run_time("nodes_session")
    assert nxt is not None and nxt > datetime.now(UTC) + timedelta(minutes=50)
    # The table is back: the next retry succeeds and the backoff resets.
    conn.execute("ALTER TABLE routers_away RENAME TO routers")
    wait_for(
        "a success",
        lambda: (
            value(daemon, "reaper_sweep_runs_total", sweep="router_leases", outcome="success") >= 1
        ),
    )
    wait_for("backoff reset", lambda: daemon.state("router_leases").failures == 0)
    assert count(conn, "routers", "router_id", "garbage-%") == 0


def test_a_budget_stops_a_run_and_the_next_run_continues_at_once(make_daemon, conn) -> None:
    seed_routers(conn, garbage=50)
    daemon = make_daemon(["router_leases"], max_rows_per_run="10", batch_size="5", strategy="index")
    wait_for(
        "every garbage row gone", lambda: count(conn, "routers", "router_id", "garbage-%") == 0
    )
    # (The daemon's state is written after the run's metrics: wait on the state.)
    wait_for(
        "the run that found nothing",
        lambda: (st := daemon.state("router_leases")).runs >= 6 and st.next_delay is None,
    )
    # Five runs of 10 rows (2 batches each), back to back although the interval is an hour,
    # then one that found nothing and left the normal interval in place.
    assert value(daemon, "reaper_deleted_rows_total", table="routers", reason="expired") == 50
    assert value(daemon, "reaper_sweep_runs_total", sweep="router_leases", outcome="success") == 6
    assert count(conn, "routers", "router_id", "keep-%") == 3
    nxt = daemon.next_run_time("router_leases")
    assert nxt is not None and nxt > datetime.now(UTC) + timedelta(minutes=50)


def test_a_run_is_skipped_while_another_session_holds_its_lock(make_daemon, dsn, conn) -> None:
    seed_routers(conn, garbage=4)
    daemon = make_daemon(["router_leases", "enrollment_requests", "bootstrap_tokens"], start=False)
    daemon.db.open()
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", (advisory_lock_key("router_leases"),))
        result = daemon.run_sweep("router_leases")
        assert result is not None and result.outcome == "skipped"
        assert result.lock_holders == [other.info.backend_pid]
        assert count(conn, "routers", "router_id", "garbage-%") == 4
        # The token sweep holds the request sweep's lock too: while requests are deleted in
        # any process, tokens wait (a request holds its token).
        other.execute("SELECT pg_advisory_lock(%s)", (advisory_lock_key("enrollment_requests"),))
        tokens = daemon.run_sweep("bootstrap_tokens")
        assert tokens is not None and tokens.outcome == "skipped"
        other.execute("SELECT pg_advisory_unlock_all()")
    result = daemon.run_sweep("router_leases")
    assert result is not None and result.outcome == "success" and result.rows == 4
    assert value(daemon, "reaper_sweep_runs_total", sweep="router_leases", outcome="skipped") == 1
    assert (
        value(daemon, "reaper_sweep_runs_total", sweep="bootstrap_tokens", outcome="skipped") == 1
    )
    # Released at the end of the run: no reaper session holds an advisory lock now (in this
    # test's database: other tests' daemons share the server).
    assert (
        scalar(
            conn,
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND a.application_name = 'reaper' "
            "AND a.datname = current_database()",
        )
        == 0
    )


def test_the_advisory_lock_probe_passes_on_a_direct_connection(make_daemon) -> None:
    daemon = make_daemon(["router_leases"], start=False)
    daemon.db.check_advisory_locks()  # raises LockNotHeld behind a transaction pooler


@pytest.mark.fresh_db
def test_http_endpoints(make_daemon, conn) -> None:
    seed_routers(conn, garbage=2)
    daemon = make_daemon(["router_leases"])
    port = daemon.http.port
    wait_for("ready", lambda: http_get(port, "/readyz")[0] == 200)
    assert http_get(port, "/readyz") == (200, "ok\n")
    assert http_get(port, "/healthz") == (200, "ok\n")
    wait_for(
        "a run",
        lambda: (
            value(daemon, "reaper_sweep_runs_total", sweep="router_leases", outcome="success") >= 1
        ),
    )
    status, body = http_get(port, "/metrics")
    assert status == 200
    runs = metric_samples(body, "reaper_sweep_runs_total")
    assert runs['{outcome="success",sweep="router_leases"}'] >= 1
    assert runs['{outcome="skipped",sweep="router_leases"}'] == 0
    assert metric_samples(body, "reaper_deleted_rows_total") == {
        '{reason="expired",table="routers"}': 2.0
    }
    assert "# TYPE reaper_batch_duration_seconds histogram" in body
    assert http_get(port, "/nothing-here")[0] == 404
    # The schema reaper needs goes away: not ready, and /readyz says which kind of reason.
    conn.execute("ALTER TABLE routers RENAME TO routers_away")
    status, body = wait_for("not ready", lambda: (r := http_get(port, "/readyz"))[0] == 503 and r)
    assert body == "not ready: swept tables missing\n"
    assert http_get(port, "/healthz")[0] == 200  # alive all the same


def test_backlog_and_storage_gauges(make_daemon, conn) -> None:
    # 5 leases expired 31 days + 1 hour ago and more: past the 30-day cutoff by 1 day 1 hour.
    seed_routers(conn, garbage=5, age="31 days 1 hour")
    conn.execute("ANALYZE routers")
    daemon = make_daemon(["router_leases", "nodes_silent"], start=False, backlog_limit="3")
    daemon.db.open()
    daemon.gauges.refresh()
    assert value(daemon, "reaper_backlog_rows", sweep="router_leases") == 3  # capped
    oldest = value(daemon, "reaper_backlog_oldest_seconds", sweep="router_leases")
    # The oldest lease expired 31 d 1 h + 5 s ago: 1 d 1 h 5 s past its cutoff (and the
    # seconds the test took).
    assert 90_005 <= oldest < 90_005 + 600
    assert value(daemon, "reaper_backlog_rows", sweep="nodes_silent") == 0
    assert value(daemon, "reaper_backlog_oldest_seconds", sweep="nodes_silent") == 0
    assert value(daemon, "reaper_storage_rows", table="routers") == 8
    daemon.run_sweep("router_leases")
    daemon.gauges.refresh()
    assert value(daemon, "reaper_backlog_rows", sweep="router_leases") == 0
    assert value(daemon, "reaper_backlog_oldest_seconds", sweep="router_leases") == 0


def test_backlog_oldest_of_every_builtin_sweep(make_daemon, conn) -> None:
    from reaper.dev import demo

    demo.seed(
        conn.info.dsn,
        demo.Sizes(
            requests_stale=200,
            requests_recent=20,
            nodes_silent=100,
            nodes_live=10,
            nodes_session_lapsed=50,
            nodes_session_kept=5,
            nodes_ephemeral_silent=30,
            nodes_ephemeral_live=5,
            tokens_expired_old=20,
            tokens_expired_old_referenced=2,
            routers_expired=10,
        ),
    )
    daemon = make_daemon(start=False)
    daemon.db.open()
    daemon.gauges.refresh()
    backlog = {s: value(daemon, "reaper_backlog_rows", sweep=s) for s in SWEEPS}
    assert backlog == {
        "nodes_session": 50,
        "nodes_silent": 100,
        "nodes_ephemeral": 30,
        "enrollment_requests": 180,
        "enrollment_requests_ephemeral": 20,
        "bootstrap_tokens": 0,  # requests still hold them
        "router_leases": 10,
    }
    oldest = {s: value(daemon, "reaper_backlog_oldest_seconds", sweep=s) for s in SWEEPS}
    day, hour = 86_400, 3600
    # demo.SEED's oldest rows: sessions lapsed 73 h + 26 d ago (72 h retention); silent
    # members 31 + 28 days (30 d); ephemeral members 2 + 9 h (1 h); requests resolved 19 h
    # ago on an ephemeral token (1 h), or 31 + 59 days ago (30 d); routers 31 d + 10 x 12 h.
    assert oldest["nodes_session"] == pytest.approx(26 * day + hour, abs=120)
    assert oldest["nodes_silent"] == pytest.approx(29 * day, abs=120)
    assert oldest["nodes_ephemeral"] == pytest.approx(10 * hour, abs=120)
    assert oldest["enrollment_requests"] == pytest.approx(60 * day + 60, abs=120)
    assert oldest["enrollment_requests_ephemeral"] == pytest.approx(18 * hour, abs=120)
    assert oldest["router_leases"] == pytest.approx(day + 120 * hour, abs=120)
    assert oldest["bootstrap_tokens"] == 0


@pytest.mark.fresh_db
def test_pg_terminate_backend_mid_batch(make_daemon, conn) -> None:
    seed_routers(conn, garbage=40)
    # While slow_down holds a row, every deleted row costs 50 ms: a batch of 40 rows is 2 s
    # in flight.
    conn.execute("""
        CREATE TABLE slow_down (on_ boolean);
        INSERT INTO slow_down VALUES (true);
        CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN IF EXISTS (SELECT FROM public.slow_down) THEN PERFORM pg_sleep(0.05); END IF;
                 RETURN OLD; END $$;
        CREATE TRIGGER slow BEFORE DELETE ON routers FOR EACH ROW EXECUTE FUNCTION slow();
    """)
    daemon = make_daemon(
        ["router_leases"], strategy="index", failure_backoff="200ms", max_failure_backoff="200ms"
    )
    dbname = conn.info.dbname
    pid = wait_for(
        "a batch in flight",
        lambda: scalar(
            conn,
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'reaper' "
            "AND datname = %s AND query LIKE '%%DELETE%%' AND state = 'active'",
            dbname,
        ),
    )
    assert scalar(conn, "SELECT pg_terminate_backend(%s)", pid)
    assert count(conn, "routers", "router_id", "garbage-%") == 40  # no half batch
    conn.execute("DELETE FROM slow_down")
    wait_for(
        "the failure counted",
        lambda: (
            value(daemon, "reaper_sweep_runs_total", sweep="router_leases", outcome="failure") >= 1
        ),
    )
    # The batch was one transaction: all 40 rows were still there when the retry started,
    # and the retry (no trigger now) removes them, without a restart.
    wait_for(
        "the retry succeeds",
        lambda: (
            value(daemon, "reaper_sweep_runs_total", sweep="router_leases", outcome="success") >= 1
        ),
    )
    assert value(daemon, "reaper_deleted_rows_total", table="routers", reason="expired") == 40
    assert count(conn, "routers", "router_id", "garbage-%") == 0


@pytest.mark.fresh_db
def test_a_read_only_server_fails_the_run_with_a_clear_error(make_daemon, conn) -> None:
    seed_routers(conn, garbage=3)
    dbname = conn.info.dbname
    daemon = make_daemon(["router_leases"], start=False)
    daemon.db.open()

    def new_sessions_read_only(on: bool) -> None:
        conn.execute(
            f'ALTER DATABASE "{dbname}" SET default_transaction_read_only = '
            + ("on" if on else "off")
        )
        # Pooled connections keep their old setting until they reconnect.
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'reaper' AND datname = %s",
            (dbname,),
        )

    new_sessions_read_only(True)
    result = daemon.run_sweep("router_leases")
    assert result is not None and result.outcome == "failure"
    assert result.error_type == "ReadOnlyDatabase"
    assert "read-only" in (result.error or "")
    assert value(daemon, "reaper_sweep_runs_total", sweep="router_leases", outcome="failure") == 1
    new_sessions_read_only(False)
    result = daemon.run_sweep("router_leases")
    assert result is not None and result.outcome == "success" and result.rows == 3


def test_apply_swaps_settings_and_reschedules(make_daemon) -> None:
    daemon = make_daemon(["router_leases", "nodes_session"])
    settings = daemon.settings
    from reaper.config.settings import build_settings

    new = build_settings(
        {"dsn": settings.dsn, "interval": "2h", "jitter": "0", "listen": "127.0.0.1:0"}
    )
    daemon.apply(new, [sweeps_of(new)[n] for n in ("router_leases", "nodes_ephemeral")])
    assert set(daemon.sweeps) == {"router_leases", "nodes_ephemeral"}
    assert daemon.next_run_time("nodes_session") is None
    assert daemon.next_run_time("nodes_ephemeral") is not None
    job = daemon._scheduler.get_job("router_leases")
    assert job.trigger.inner.interval == timedelta(hours=2)


@pytest.mark.fresh_db
def test_a_declared_sweep_gets_its_backlog_gauges(dsn, conn) -> None:
    from reaper.config.settings import build_settings
    from reaper.config.sweeps import configured_sweeps

    conn.execute("CREATE TABLE audit_log (id bigint PRIMARY KEY, logged_at timestamptz)")
    conn.execute("CREATE INDEX ON audit_log (logged_at)")
    conn.execute(
        "INSERT INTO audit_log SELECT i, now() - interval '10 days'"
        " - i * interval '1 hour' FROM generate_series(1, 6) i"
    )
    conn.execute("INSERT INTO audit_log VALUES (100, now())")
    settings = build_settings(
        {"dsn": dsn, "listen": "127.0.0.1:0", "interval": "1h"},
        {
            "sweeps": {
                "audit_log": {
                    "table": "public.audit_log",
                    "reason": "expired",
                    "retention": "7d",
                    "age": "logged_at",
                    "interval": "10m",
                }
            }
        },
    )
    audit = next(s for s in configured_sweeps(settings) if s.name == "audit_log")
    assert audit.since  # the first age column dates the backlog's oldest row
    daemon = Daemon(settings, [audit], registry=CollectorRegistry())
    try:
        assert daemon._trigger(audit).inner.interval == timedelta(minutes=10)
        daemon.db.open()
        daemon.gauges.refresh()
        assert value(daemon, "reaper_backlog_rows", sweep="audit_log") == 6
        # The oldest row was logged 10 days + 6 hours ago: 3 days 6 hours past the 7-day cutoff.
        oldest = value(daemon, "reaper_backlog_oldest_seconds", sweep="audit_log")
        assert 3 * 86_400 + 6 * 3600 <= oldest < 3 * 86_400 + 6 * 3600 + 600
    finally:
        daemon.stop(timedelta(seconds=5))


def test_database_up_and_the_servers_version(
    make_daemon: Callable[..., Daemon], conn: psycopg.Connection[Any]
) -> None:
    """reaper_database_up reads 1 once the database answered the readiness probe, 0 while it
    cannot be reached; reaper_build_info names the server's version."""
    from tests.support.daemon import free_port

    daemon = make_daemon(sweeps=["router_leases"], start=False)
    assert value(daemon, "reaper_database_up") == 0  # no answer yet
    daemon.db.open()
    daemon._probe()
    assert value(daemon, "reaper_database_up") == 1
    version = int(conn.execute("SHOW server_version_num").fetchone()[0])  # type: ignore[index]
    shown = f"{version // 10000}.{version % 10000}"
    builds = [
        s.labels
        for m in daemon.metrics.registry.collect()
        for s in m.samples
        if s.name == "reaper_build_info"
    ]
    assert [b["postgresql"] for b in builds] == [shown]
    gone = make_daemon(
        sweeps=["router_leases"],
        start=False,
        dsn=f"postgresql://postgres@127.0.0.1:{free_port()}/postgres",
        connect_timeout="1s",
    )
    gone.db.open()
    gone._probe()
    assert value(gone, "reaper_database_up") == 0
    assert gone.readyz()[0] is False

"""`reaper run` as a process: exit codes, signals, a database that goes away and comes back,
and several processes sharing one database."""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import psycopg
import pytest

from reaper.dev import demo, devserver
from tests.support import credentials
from tests.support.daemon import (
    ReaperProcess,
    count,
    free_port,
    http_get,
    metric_samples,
    reaper_command,
    reaper_sessions,
    seed_routers,
    start_reaper,
    wait_for,
    wait_for_delete_in_flight,
)


def one_line_error(args: list[str], tmp_path: Path) -> str:
    proc = subprocess.run(
        [*reaper_command(), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "REAPER_LOG_FORMAT": "json", **credentials()},
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_bad_configuration_exits_2_with_one_line(tmp_path) -> None:
    assert "--interval" in one_line_error(["run", "--interval", "soon"], tmp_path)
    assert "--listen" in one_line_error(["run", "--listen", "nowhere"], tmp_path)
    assert "--jitter" in one_line_error(["run", "--jitter", "3"], tmp_path)
    config = tmp_path / "reaper.toml"
    config.write_text('[sweeps.router_leases]\ninterval = "often"\n')
    assert "[sweeps.router_leases]" in one_line_error(["run", "--config", str(config)], tmp_path)
    with __import__("socket").socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = one_line_error(
            ["run", "--listen", f"127.0.0.1:{port}", "--dsn", "postgresql://x@127.0.0.1:1/x"],
            tmp_path,
        )
        assert f"--listen 127.0.0.1:{port}: cannot listen there" in line


def test_a_database_down_at_startup_is_not_bad_configuration(tmp_path) -> None:
    port = free_port()
    dead = free_port()
    reaper = start_reaper(
        [
            "run",
            "--listen",
            f"127.0.0.1:{port}",
            "--connect-timeout",
            "1s",
            "--dsn",
            f"postgresql://reaper:secret-pw@127.0.0.1:{dead}/control",
        ],
        tmp_path,
    )
    try:
        wait_for("the port", lambda: http_get(port, "/healthz")[0] == 200)
        # Anyone may ask the open port: the class of the reason, never the target.
        status, body = wait_for(
            "the reason",
            lambda: (
                (r := http_get(port, "/readyz"))[1] == "not ready: database unreachable\n" and r
            ),
        )
        assert status == 503
        assert str(dead) not in body and "control" not in body and "reaper" not in body
        assert reaper.proc.poll() is None, "it keeps running and retrying"
    finally:
        assert reaper.terminate() == 0
    text = reaper.log_path.read_text()
    assert "database_not_ready" in text and "refused" in text  # the reason is in the log
    assert "secret-pw" not in text


@pytest.fixture
def private_server() -> Iterator[dict[str, Any]]:
    """A PostgreSQL of the test's own (pgserver), to stop and start: never the shared one."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pgserver = pytest.importorskip("pgserver")
        from pgserver._commands import pg_ctl
    # As devserver does: a directory of its own under /tmp (pgserver, run as root, hands it
    # to an unprivileged user; pytest's tmp_path is not reachable for that user).
    data_dir = tempfile.mkdtemp(prefix="reaper-pg-")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        srv = pgserver.get_server(data_dir, cleanup_mode="delete")
    uri = srv.get_uri()
    socket_dir = parse_qs(urlparse(uri).query)["host"][0]

    def stop() -> None:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=srv.pgdata, user=srv.system_user)

    def start() -> None:
        pg_ctl(
            ["-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(srv.log), "start"],
            pgdata=srv.pgdata,
            user=srv.system_user,
        )

    try:
        yield {"dsn": uri, "stop": stop, "start": start}
    finally:
        # pgserver stops only the postmaster it started itself; after a stop and start here it
        # would delete the directory under a running server (whose WAL writes then race the
        # deletion). Stop whichever postmaster runs now first.
        with contextlib.suppress(subprocess.CalledProcessError):
            stop()
        srv.cleanup()


def test_outage_and_restart_of_the_database(private_server, tmp_path) -> None:
    """Down at startup, up, restarted, up again: reaper rides through without a restart."""
    dsn = devserver.create_database(private_server["dsn"], "control")
    devserver.load_schema(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        seed_routers(conn, garbage=5, prefix="a-")
    private_server["stop"]()
    port = free_port()
    reaper = start_reaper(
        [
            "run",
            "--listen",
            f"127.0.0.1:{port}",
            "--dsn",
            dsn,
            "--interval",
            "300ms",
            "--jitter",
            "0",
            "--failure-backoff",
            "100ms",
            "--max-failure-backoff",
            "500ms",
            "--connect-timeout",
            "1s",
        ],
        tmp_path,
    )
    try:
        wait_for("the port", lambda: http_get(port, "/healthz")[0] == 200)
        assert http_get(port, "/readyz")[0] == 503
        private_server["start"]()
        wait_for("ready", lambda: http_get(port, "/readyz")[0] == 200)
        with psycopg.connect(dsn, autocommit=True) as conn:
            wait_for(
                "first garbage gone", lambda: count(conn, "routers", "router_id", "a-garbage%") == 0
            )
        # Counted once durable (a WAL flush later, docs/metrics.md): a restart before that
        # would leave them uncounted (logged), never counted twice.
        wait_for(
            "the first rows counted",
            lambda: (
                metric_samples(http_get(port, "/metrics")[1], "reaper_deleted_rows_total").get(
                    '{reason="expired",table="routers"}'
                )
                == 5
            ),
        )
        # The database restarts under reaper's feet.
        private_server["stop"]()
        wait_for("not ready", lambda: http_get(port, "/readyz")[0] == 503)
        wait_for(
            "a failed run",
            lambda: (
                metric_samples(http_get(port, "/metrics")[1], "reaper_sweep_runs_total").get(
                    '{outcome="failure",sweep="router_leases"}', 0
                )
                > 0
            ),
        )
        private_server["start"]()
        with psycopg.connect(dsn, autocommit=True) as conn:
            seed_routers(conn, garbage=4, keep=0, prefix="b-")
            wait_for("ready again", lambda: http_get(port, "/readyz")[0] == 200)
            wait_for(
                "new garbage gone", lambda: count(conn, "routers", "router_id", "b-garbage%") == 0
            )
            assert count(conn, "routers", "router_id", "%keep%") == 3
        # The counter moves once the batch's commit is flushed, within a second of the rows'
        # absence.
        wait_for(
            "the deleted rows counted",
            lambda: (
                metric_samples(http_get(port, "/metrics")[1], "reaper_deleted_rows_total").get(
                    '{reason="expired",table="routers"}'
                )
                == 9
            ),
        )
        assert reaper.proc.poll() is None
    finally:
        assert reaper.terminate() == 0
    events = {e["event"] for e in reaper.logs()}
    assert {
        "database_not_ready",
        "database_ready",
        "sweep_failed",
        "sweep_retry_scheduled",
    } <= events


SLOW_TRIGGER = """
    CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS
    $$ BEGIN PERFORM pg_sleep(%s); RETURN OLD; END $$;
    CREATE TRIGGER slow BEFORE DELETE ON routers FOR EACH ROW EXECUTE FUNCTION slow();
"""


def sigterm_mid_sweep(
    dsn: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    *,
    row_seconds: float,
    batch: int,
    shutdown_timeout: str,
) -> tuple[float, ReaperProcess]:
    """Start `reaper run` on 400 slow garbage rows, SIGTERM it once a batch is done and the
    next is in flight; (seconds from SIGTERM to exit, the process)."""
    seed_routers(conn, garbage=400)
    conn.execute(SLOW_TRIGGER % row_seconds)
    # --busy-share 1: batches back to back, so that the next is in flight when SIGTERM lands
    # (this test's own polling would otherwise count as live traffic, and reaper would wait).
    reaper = start_reaper(
        [
            "run",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--dsn",
            dsn,
            "--jitter",
            "0",
            "--batch-size",
            str(batch),
            "--strategy",
            "index",
            "--shutdown-timeout",
            shutdown_timeout,
            "--busy-share",
            "1",
        ],
        tmp_path,
    )
    wait_for("a batch committed", lambda: count(conn, "routers", "router_id", "garbage-%") < 400)
    wait_for_delete_in_flight(conn)
    t0 = time.monotonic()
    reaper.proc.send_signal(signal.SIGTERM)
    code = reaper.proc.wait(timeout=60)
    seconds = time.monotonic() - t0
    assert code == 0
    return seconds, reaper


@pytest.mark.fresh_db
def test_sigterm_mid_sweep_lets_the_batch_in_flight_commit(dsn, conn, tmp_path) -> None:
    # 20 rows x 20 ms: each batch is 0.4 s, far inside the 10 s shutdown timeout.
    seconds, reaper = sigterm_mid_sweep(
        dsn, conn, tmp_path, row_seconds=0.02, batch=20, shutdown_timeout="10s"
    )
    print(f"\nshutdown after SIGTERM mid-sweep (batch of 0.4 s in flight): {seconds:.2f} s")
    assert seconds < 10 + 5  # the timeout, plus interpreter start-up slack on a busy machine
    left = count(conn, "routers", "router_id", "garbage-%")
    assert (400 - left) % 20 == 0, "whole batches only"
    finished = [e for e in reaper.events("sweep_finished") if e["sweep"] == "router_leases"]
    assert finished and finished[-1]["stopped_by"] == "stop"
    assert finished[-1]["rows"] == 400 - left
    assert reaper.events("daemon_stopped")[0]["clean"] is True
    # A backend leaves pg_stat_activity as it exits, a moment after reaper closed it.
    wait_for("reaper's sessions gone", lambda: reaper_sessions(conn, conn.info.dbname) == 0)


@pytest.mark.fresh_db
def test_sigterm_cancels_a_batch_that_outlasts_the_shutdown_timeout(dsn, conn, tmp_path) -> None:
    # 40 rows x 100 ms: a batch is 4 s, longer than the 2 s shutdown timeout.
    seconds, reaper = sigterm_mid_sweep(
        dsn, conn, tmp_path, row_seconds=0.1, batch=40, shutdown_timeout="2s"
    )
    print(f"\nshutdown after SIGTERM with a 4 s batch in flight, timeout 2 s: {seconds:.2f} s")
    assert seconds < 2 + 5
    left = count(conn, "routers", "router_id", "garbage-%")
    assert (400 - left) % 40 == 0, "the cancelled batch rolled back whole"
    assert reaper.events("shutdown_cancelling")
    # A backend leaves pg_stat_activity as it exits, a moment after reaper closed it.
    wait_for("reaper's sessions gone", lambda: reaper_sessions(conn, conn.info.dbname) == 0)


# Its own database: it counts reaper's sessions there, and a session another test left in the
# shared database (a backend still waiting on a lock its client has gone from) would be counted.
@pytest.mark.fresh_db
def test_three_daemons_and_a_run_once_delete_each_row_once(dsn, conn, tmp_path) -> None:
    sizes = demo.Sizes(
        requests_stale=3000,
        requests_recent=50,
        nodes_silent=3000,
        nodes_silent_banned=10,
        nodes_live=100,
        nodes_session_lapsed=1500,
        nodes_session_kept=20,
        nodes_ephemeral_silent=600,
        nodes_ephemeral_live=20,
    )
    demo.seed(dsn, sizes)
    before = demo.census(dsn)
    # The demo's tables are nearly all garbage: the full-table interlock is opted out of.
    common = [
        "--dsn",
        dsn,
        "--batch-size",
        "100",
        "--strategy",
        "index",
        "--max-eligible-fraction",
        "1",
    ]
    daemons = []
    for i in range(3):
        port = free_port()
        p = start_reaper(
            [
                "run",
                "--listen",
                f"127.0.0.1:{port}",
                "--interval",
                "300ms",
                "--jitter",
                "0.5",
                "--max-rows-per-run",
                "300",
                "--gauge-interval",
                "1h",
                *common,
            ],
            tmp_path,
            name=f"daemon{i}",
        )
        p.port = port
        daemons.append(p)
    try:
        wait_for(
            "sweeping began",
            lambda: demo.census(dsn)["nodes"]["garbage"] < before["nodes"]["garbage"],
        )
        once = subprocess.run(
            [*reaper_command(), "run-once", "--json", *common],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "REAPER_LOG_FORMAT": "json", **credentials()},
        )
        # 3: every sweep was skipped, the daemons holding each lock at that moment.
        assert once.returncode in (0, 3), once.stderr
        once_results = json.loads(once.stdout)
        wait_for(
            "every garbage row gone",
            lambda: all(c["garbage"] == 0 for c in demo.census(dsn).values()),
        )
        removed = {t: float(c["garbage"]) for t, c in before.items()}

        def deleted() -> dict[str, float]:
            """Sum of the counters (three daemons and the run-once), per table."""
            out: dict[str, float] = {}
            for d in daemons:
                for labels, v in metric_samples(
                    http_get(d.port, "/metrics")[1], "reaper_deleted_rows_total"
                ).items():
                    table = labels.split('table="')[1].split('"')[0]
                    out[table] = out.get(table, 0) + v
            for r in once_results:
                out[r["table"]] = out.get(r["table"], 0) + r["rows"]
            return out

        # A counter moves right after its batch's commit: a daemon may not have counted its
        # last batch yet when the rows are seen gone.
        counted = wait_for(
            "the deleted rows counted", lambda: (now := deleted()) == removed and now
        )
    finally:
        codes = [d.terminate() for d in daemons]
    assert codes == [0, 0, 0]
    after = demo.census(dsn)
    assert {t: c["keep"] for t, c in after.items()} == {t: c["keep"] for t, c in before.items()}
    assert counted == removed

    # No two processes ran the same sweep at once, nor requests and tokens together.
    held: dict[str, list[tuple[float, float, str]]] = {}
    once_proc = ReaperProcess(None, tmp_path / "once.log")  # type: ignore[arg-type]
    once_proc.log_path.write_text(once.stderr)
    skipped = 0
    for name, proc in [*((f"daemon{i}", d) for i, d in enumerate(daemons)), ("once", once_proc)]:
        skipped += len(proc.events("sweep_skipped"))
        for e in proc.events("sweep_finished"):
            group = (
                "requests+tokens"
                if e["sweep"] in ("enrollment_requests", "bootstrap_tokens")
                else e["sweep"]
            )
            held.setdefault(group, []).append((e["locked_at"], e["unlocked_at"], name))
    for group, spans in held.items():
        spans.sort()
        for (_, end, who), (start, _, other) in itertools.pairwise(spans):
            assert start >= end, f"{group}: {who} and {other} overlapped"
    runs = sum(len(v) for v in held.values())
    print(f"\n{runs} runs by 3 daemons and a run-once, {skipped} skipped on a held lock")
    wait_for("reaper's sessions gone", lambda: reaper_sessions(conn, conn.info.dbname) == 0)


def test_transaction_pooling_fails_loudly_at_startup(pgbouncer, tmp_path) -> None:
    through = pgbouncer("transaction")
    reaper = start_reaper(
        ["run", "--listen", f"127.0.0.1:{free_port()}", "--dsn", through], tmp_path
    )
    code = reaper.proc.wait(timeout=60)
    assert code == 2
    last = reaper.log_path.read_text().strip().splitlines()[-1]
    assert last.startswith("reaper: ") and "transaction-pooling proxy" in last


def test_session_pooling_holds_the_lock(pgbouncer, conn, tmp_path) -> None:
    seed_routers(conn, garbage=3)
    through = pgbouncer("session")
    port = free_port()
    reaper = start_reaper(
        [
            "run",
            "--listen",
            f"127.0.0.1:{port}",
            "--dsn",
            through,
            "--jitter",
            "0",
            "--session-pooler",
        ],
        tmp_path,
    )
    try:
        wait_for("garbage gone", lambda: count(conn, "routers", "router_id", "garbage-%") == 0)
        assert http_get(port, "/readyz")[0] == 200
    finally:
        assert reaper.terminate() == 0


def test_run_once_refuses_transaction_pooling_too(pgbouncer) -> None:
    through = pgbouncer("transaction")
    proc = subprocess.run(
        [*reaper_command(), "run-once", "--dsn", through],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "REAPER_LOG_FORMAT": "json", **credentials()},
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("reaper: a session-level advisory")


def test_sigint_stops_an_idle_daemon_with_exit_0(dsn, tmp_path) -> None:
    port = free_port()
    reaper = start_reaper(["run", "--listen", f"127.0.0.1:{port}", "--dsn", dsn], tmp_path)
    wait_for("ready", lambda: http_get(port, "/readyz")[0] == 200)
    reaper.proc.send_signal(signal.SIGINT)
    assert reaper.proc.wait(timeout=60) == 0
    assert reaper.events("stop_requested")[0]["signal"] == "SIGINT"
    assert http_get(port, "/healthz")[0] == 0  # the port is closed

"""``reaper run-once`` stopped by a signal, as an operator sees it: SIGTERM or SIGINT during a
sweep lets the batch in flight commit, starts no further sweep, and the command still prints
what it deleted, logs the sweep's ``sweep_finished`` and writes its metrics file; the exit
code is 128 + the signal's number. A DELETE running when the signal lands commits whole.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import psycopg
import pytest

from reaper.dev import demo
from tests.support import (
    census,
    credentials,
    reaper_executable,
    sample,
    textfile_samples,
)
from tests.support.daemon import (
    STARTED,
    count,
    seed_routers,
    wait_for,
    wait_for_delete_in_flight,
)

GARBAGE = 5_000
KEEP = 50


def start_run_once(dsn: str, tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    """``reaper run-once <args>`` on ``dsn``, its stdout and stderr (JSON log lines) in
    files under ``tmp_path``, with none of the test's own REAPER_* or PG* variables."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REAPER_", "PG")) and k != "COLUMNS"
    }
    with (tmp_path / "stdout").open("wb") as out, (tmp_path / "stderr").open("wb") as err:
        proc = subprocess.Popen(
            [reaper_executable(), "run-once", *args],
            stdout=out,
            stderr=err,
            env={**env, **credentials(), "REAPER_DSN": dsn},
        )
    STARTED.append(proc)  # killed after the test if it is still running
    return proc


def log_events(tmp_path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in (tmp_path / "stderr").read_text().splitlines() if line.strip()
    ]


def seed(dsn: str) -> None:
    """``GARBAGE`` nodes whose session lapsed (nodes_session's), ``KEEP`` whose session holds,
    and a few expired router leases (router_leases', the sweep that runs after it)."""
    nothing = {f.name: 0 for f in fields(demo.Sizes)}
    demo.seed(
        dsn,
        demo.Sizes(
            **{
                **nothing,
                "nodes_session_lapsed": GARBAGE,
                "nodes_session_kept": KEEP,
                "routers_expired": 20,
                "routers_live": 3,
            }
        ),
    )


@pytest.mark.parametrize(
    ("signum", "code", "as_json"),
    [
        (signal.SIGTERM, 143, True),
        (signal.SIGINT, 130, False),
    ],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_signal_stops_run_once_after_the_batch_in_flight_and_reports_it(
    dsn: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    signum: int,
    code: int,
    as_json: bool,
) -> None:
    seed(dsn)
    metrics_file = tmp_path / "reaper.prom"
    # Small batches, each followed by a wait for the WAL brake: the run is still going when
    # the signal lands, most likely in a wait, which must end at once.
    proc = start_run_once(
        dsn,
        tmp_path,
        "--sweep",
        "nodes_session",
        "--sweep",
        "router_leases",
        "--batch-size",
        "20",
        "--strategy",
        "index",
        "--max-wal-rate",
        "1KB",
        "--max-eligible-fraction",
        "1",
        "--busy-share",
        "1",
        "--metrics-file",
        str(metrics_file),
        *(["--json"] if as_json else []),
    )
    out, err = tmp_path / "stdout", tmp_path / "stderr"

    wait_for("a batch committed", lambda: census(conn, ["nodes"])["nodes"]["garbage"] < GARBAGE)
    t0 = time.monotonic()
    proc.send_signal(signum)
    assert proc.wait(timeout=60) == code, err.read_text()
    # A generous bound: the signal must not wait for the rest of the backlog (minutes at
    # this brake), but a busy machine is slow at times.
    assert time.monotonic() - t0 < 20

    left = census(conn, ["nodes", "routers"])
    deleted = GARBAGE - left["nodes"]["garbage"]
    assert 0 < deleted < GARBAGE
    assert left["nodes"]["keep"] == KEEP
    # The sweep after the stopped one never started.
    assert left["routers"]["garbage"] == 20

    events = log_events(tmp_path)
    finished = [e for e in events if e["event"] == "sweep_finished"]
    assert [(e["sweep"], e["stopped_by"], e["rows"]) for e in finished] == [
        ("nodes_session", "stop", deleted)
    ]
    stopped = [e for e in events if e["event"] == "stopped_by_signal"]
    assert [(e["signal"], e["not_started"]) for e in stopped] == [
        (signal.Signals(signum).name, ["router_leases"])
    ]

    if as_json:
        results = json.loads(out.read_text())
        assert [(r["sweep"], r["rows"], r["stopped_by"]) for r in results] == [
            ("nodes_session", deleted, "stop")
        ]
    else:
        lines = out.read_text().splitlines()
        row = [line for line in lines if "nodes_session" in line]
        assert len(row) == 1 and f"{deleted:,}" in row[0], out.read_text()
        assert not [line for line in lines if "router_leases" in line]

    samples = textfile_samples(metrics_file.read_text())
    assert sample(samples, "reaper_deleted_rows_total", table="nodes", reason="session") == deleted


@pytest.mark.fresh_db
def test_sigterm_while_a_batch_deletes_lets_it_commit_whole(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    seed_routers(conn, garbage=400)
    # 20 rows x 50 ms: each batch's DELETE runs for a second, long enough to be caught.
    conn.execute("""
        CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN PERFORM pg_sleep(0.05); RETURN OLD; END $$;
        CREATE TRIGGER slow BEFORE DELETE ON routers FOR EACH ROW EXECUTE FUNCTION slow();
    """)
    proc = start_run_once(
        dsn,
        tmp_path,
        "--sweep",
        "router_leases",
        "--batch-size",
        "20",
        "--strategy",
        "index",
        "--busy-share",
        "1",
        "--max-eligible-fraction",
        "1",
        "--json",
    )
    wait_for("a batch committed", lambda: count(conn, "routers", "router_id", "garbage-%") < 400)
    wait_for_delete_in_flight(conn)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143, (tmp_path / "stderr").read_text()

    deleted = 400 - count(conn, "routers", "router_id", "garbage-%")
    # The batch in flight committed: at least two batches, and whole ones.
    assert deleted >= 40 and deleted % 20 == 0
    assert count(conn, "routers", "router_id", "keep-%") == 3
    [result] = json.loads((tmp_path / "stdout").read_text())
    assert (result["rows"], result["stopped_by"], result["outcome"]) == (deleted, "stop", "success")
    assert [e["rows"] for e in log_events(tmp_path) if e["event"] == "sweep_finished"] == [deleted]


# Each run is stopped at a different moment after its first batch: in a batch, in a wait of
# the WAL brake, between two. Half the runs get the signal twice, 20 ms apart, as under a
# wrapper (make, a shell) that forwards the Ctrl-C the whole process group received.
LOOP_RUNS = 8


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_every_stopped_run_once_reports_what_it_deleted(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, signum: int
) -> None:
    for run in range(LOOP_RUNS):
        conn.execute("TRUNCATE nodes, routers CASCADE")
        seed(dsn)
        where = tmp_path / str(run)
        where.mkdir()
        proc = start_run_once(
            dsn,
            where,
            "--sweep",
            "nodes_session",
            "--batch-size",
            "50",
            "--strategy",
            "index",
            "--max-wal-rate",
            "200KB",
            "--max-eligible-fraction",
            "1",
            "--json",
        )
        wait_for("a batch committed", lambda: census(conn, ["nodes"])["nodes"]["garbage"] < GARBAGE)
        time.sleep(0.05 * run)
        proc.send_signal(signum)
        if run % 2:
            time.sleep(0.02)
            proc.send_signal(signum)
        assert proc.wait(timeout=60) == 128 + signum, (where / "stderr").read_text()
        deleted = GARBAGE - census(conn, ["nodes"])["nodes"]["garbage"]
        [result] = json.loads((where / "stdout").read_text())
        assert (result["rows"], result["stopped_by"]) == (deleted, "stop"), run
        finished = [e for e in log_events(where) if e["event"] == "sweep_finished"]
        assert [e["rows"] for e in finished] == [deleted], run

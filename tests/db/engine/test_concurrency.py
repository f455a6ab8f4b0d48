"""Sweeps racing writers on a real PostgreSQL.

- Members refreshing right at the cutoff while a sweep runs: no row whose refresh committed
  is deleted, and the refreshes never fail.
- A writer holding row locks on eligible rows for the whole sweep: the sweep neither waits for
  it (it finishes while the writer still holds the locks) nor deadlocks with it; the locked
  rows survive and the writer commits.
- A request inserted for a token while the token sweep runs: the token and the request
  survive, the other expired tokens go.

No sleeps decide an outcome: threads hand over with events, and a sweep that waited on a
writer would fail on its lock_timeout instead of hanging.
"""

from __future__ import annotations

import random
import threading
from dataclasses import replace
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import structlog

from reaper.config.engine import engine_options
from reaper.config.settings import Settings
from reaper.db import ConnectionSettings, Database
from reaper.engine.result import SweepResult
from reaper.engine.run import run_sweep, run_sweeps
from reaper.sqltext.declared import reviewed
from tests.support import (
    NOW,
    SECOND,
    add_request,
    add_token,
    keys,
    sweeps_of,
)
from tests.support.daemon import scalar, wait_for

NODE = timedelta(days=30)
# The heap walk on one connection and on three (--parallel), and the index path.
WALKS = pytest.mark.parametrize(("strategy", "parallel"), [("heap", 1), ("heap", 3), ("index", 1)])
# Long enough that a sweep waiting on a writer's row lock would be caught failing, short
# enough to keep a broken build's test quick.
WAIT_LIMIT = "3s"


def open_database(settings: Settings) -> Database:
    return Database(
        ConnectionSettings(
            dsn=settings.dsn or "",
            statement_timeout=settings.statement_timeout,
            lock_timeout=settings.lock_timeout,
            idle_in_transaction_session_timeout=settings.idle_in_transaction_session_timeout,
        ),
    )


def seed_silent(conn: psycopg.Connection[Any], n: int, enrolled_at: Any) -> list[str]:
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at)"
        " SELECT 'n-' || i, %s FROM generate_series(1, %s) i",
        (enrolled_at, n),
    )
    # Analyzed, so that the heap walk sizes its block ranges from the table (many batches).
    conn.execute("ANALYZE nodes")
    return [f"n-{i}" for i in range(1, n + 1)]


class Refresher(threading.Thread):
    """A member's heartbeats: each transaction rewrites enrolled_at of a few members, one at a
    time in random order (the order that deadlocks with a plain DELETE), then commits."""

    def __init__(self, dsn: str, peers: list[str], stop: threading.Event, seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.peers, self.stop, self.rng = dsn, peers, stop, random.Random(seed)
        self.refreshed: set[str] = set()
        self.commits = 0
        self.errors: list[BaseException] = []

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn) as conn:
                while not self.stop.is_set():
                    touched = []
                    with conn.transaction():
                        for peer in self.rng.sample(self.peers, 3):
                            cur = conn.execute(
                                "UPDATE nodes SET enrolled_at = %s WHERE peer_id = %s"
                                " RETURNING peer_id",
                                (NOW - NODE + SECOND, peer),
                            )
                            touched += [r[0] for r in cur.fetchall()]
                    # Committed: these members were heard from and must stay.
                    self.refreshed.update(touched)
                    self.commits += 1
        except BaseException as exc:
            self.errors.append(exc)


@WALKS
def test_refreshes_racing_a_sweep_keep_their_rows(
    dsn, conn, make_settings, strategy, parallel
) -> None:
    peers = seed_silent(conn, 3000, NOW - NODE - SECOND)
    settings = make_settings(
        strategy=strategy,
        batch_size=20,
        lock_timeout=WAIT_LIMIT,
        statement_timeout=WAIT_LIMIT,
        parallel=parallel,
    )
    stop = threading.Event()
    # Each heartbeat stream has members of its own: two streams that shared members could
    # deadlock with each other (not with reaper) and fail the test for the wrong reason.
    refreshers = [Refresher(dsn, peers[seed::3], stop, seed) for seed in range(3)]
    for r in refreshers:
        r.start()

    def interleave(result: SweepResult) -> None:
        # Let the heartbeats commit between batches too, not only during them.
        target = sum(r.commits for r in refreshers) + 1
        for _ in range(200):
            if sum(r.commits for r in refreshers) >= target or stop.is_set():
                return
            threading.Event().wait(0.001)

    with open_database(settings) as db:
        result = run_sweep(
            db,
            sweeps_of(settings)["nodes_silent"],
            engine_options(settings),
            now=NOW,
            on_batch=interleave,
        )
    stop.set()
    for r in refreshers:
        r.join(timeout=30)
    assert all(not r.errors for r in refreshers), [r.errors for r in refreshers]
    assert result.outcome == "success", result.error
    refreshed = set().union(*(r.refreshed for r in refreshers))
    left = keys(conn, "nodes")
    assert refreshed <= left, f"refreshed members deleted: {sorted(refreshed - left)[:10]}"
    # Everything not refreshed went; what the sweep counted is what went.
    assert left == refreshed
    assert result.rows == len(peers) - len(left)
    assert sum(r.commits for r in refreshers) > result.batches


class LockHolder(threading.Thread):
    """A writer that locks a few eligible rows (keeping them eligible), then keeps touching
    random rows of the garbage while the sweep runs, and commits only when told."""

    def __init__(self, dsn: str, first: list[str], others: list[str]) -> None:
        super().__init__(daemon=True)
        self.dsn, self.first, self.others = dsn, first, others
        self.locked = threading.Event()
        self.sweep_done = threading.Event()
        self.may_commit = threading.Event()
        self.committed = threading.Event()
        self.held: set[str] = set()
        self.errors: list[BaseException] = []

    def touch(self, conn: psycopg.Connection[Any], peers: list[str]) -> None:
        for peer in peers:
            cur = conn.execute(
                "UPDATE nodes SET bootstrap_token_id = 7 WHERE peer_id = %s RETURNING peer_id",
                (peer,),
            )
            self.held.update(r[0] for r in cur.fetchall())

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn) as conn:
                self.touch(conn, self.first)
                self.locked.set()
                rng = random.Random(1)
                while not self.sweep_done.is_set():
                    # Waits (briefly) whenever it meets a row that a batch holds.
                    self.touch(conn, [rng.choice(self.others)])
                self.may_commit.wait(timeout=60)
                conn.execute(
                    "UPDATE nodes SET enrolled_at = %s WHERE peer_id = ANY(%s)",
                    (NOW, list(self.held)),
                )
                conn.commit()
                self.committed.set()
        except BaseException as exc:
            self.errors.append(exc)
            self.locked.set()


@WALKS
def test_a_writer_holding_row_locks_is_neither_waited_for_nor_deadlocked(
    dsn, conn, make_settings, strategy, parallel
) -> None:
    peers = seed_silent(conn, 600, NOW - timedelta(days=60))
    settings = make_settings(
        strategy=strategy,
        batch_size=10,
        lock_timeout=WAIT_LIMIT,
        statement_timeout=WAIT_LIMIT,
        parallel=parallel,
    )
    writer = LockHolder(dsn, peers[:3] + peers[-3:], peers[3:-3])
    writer.start()
    assert writer.locked.wait(timeout=30)
    with open_database(settings) as db:
        result = run_sweep(
            db,
            sweeps_of(settings)["nodes_silent"],
            engine_options(settings),
            now=NOW,
            on_batch=lambda r: writer.errors and writer.sweep_done.set(),
        )
        writer.sweep_done.set()
        # The sweep is over and the writer has not committed: the sweep did not wait for it.
        assert writer.is_alive() and not writer.committed.is_set()
    writer.may_commit.set()
    writer.join(timeout=60)
    assert not writer.errors, writer.errors
    assert writer.committed.is_set()
    assert result.outcome == "success", result.error
    # The batches holding the writer's rows failed on their short lock_timeout, were split
    # until each held row was alone, and each held row was skipped for this run.
    assert result.contended_batches >= 1
    left = keys(conn, "nodes")
    assert result.skipped == {"locked": len(left)}
    assert set(peers[:3] + peers[-3:]) <= writer.held
    assert left == writer.held
    assert result.rows == len(peers) - len(left)
    # The writer's commit took effect on every row it held.
    row = conn.execute(
        "SELECT count(*) FROM nodes WHERE enrolled_at = %s AND bootstrap_token_id = 7", (NOW,)
    ).fetchone()
    assert row is not None and row[0] == len(left)


def seed_tokens(conn: psycopg.Connection[Any]) -> int:
    """Ten expired, unreferenced tokens and the one a request will reference; its id."""
    for i in range(10):
        add_token(conn, f"go-{i}", expires_at=NOW - timedelta(days=90))
    add_token(conn, "stay-live", expires_at=NOW + NODE)
    return add_token(conn, "stay-raced", expires_at=NOW - timedelta(days=90))


def check_tokens(conn: psycopg.Connection[Any], result: SweepResult) -> None:
    assert result.outcome == "success", result.error
    assert result.rows == 10
    assert keys(conn, "bootstrap_tokens") == {"stay-live", "stay-raced"}
    assert keys(conn, "enrollment_requests") == {"raced-request"}


def test_a_request_being_inserted_keeps_its_token(dsn, conn, make_settings) -> None:
    """The request's transaction is open (it holds its token's key-share lock) for the whole
    sweep: the sweep skips the token without waiting, and the request commits."""
    raced = seed_tokens(conn)
    settings = make_settings(lock_timeout=WAIT_LIMIT, statement_timeout=WAIT_LIMIT)
    with psycopg.connect(dsn) as writer:
        add_request(writer, "raced-request", token_id=raced, created_at=NOW)
        with open_database(settings) as db:
            result = run_sweep(
                db, sweeps_of(settings)["bootstrap_tokens"], engine_options(settings), now=NOW
            )
        writer.commit()
    check_tokens(conn, result)


@pytest.mark.fresh_db
def test_a_request_committed_during_the_token_batch_keeps_its_token(
    dsn, conn, make_settings
) -> None:
    """The request commits after the batch statement took its snapshot (so the predicate does
    not see it) and before the delete: the foreign key refuses the delete, the batch rolls
    back and is retried, and the retry sees the request.

    To open that window on purpose, the sweep is a copy of bootstrap_tokens whose predicate,
    in a DELETE, first waits at a gate (a function that sleeps until a row says open): the
    test sees the batch waiting, commits the request, then opens the gate (a handshake, at
    any speed). The test's own predicate text, never a config file's (a declared sweep is
    data)."""
    raced = seed_tokens(conn)
    conn.execute("""
        CREATE TABLE gate (open boolean NOT NULL);
        INSERT INTO gate VALUES (false);
        CREATE FUNCTION public.wait_at_gate() RETURNS boolean LANGUAGE plpgsql AS $$
        BEGIN
            WHILE NOT (SELECT open FROM public.gate) LOOP PERFORM pg_sleep(0.005); END LOOP;
            RETURN true;
        END $$""")
    settings = make_settings(strategy="index", statement_timeout="60s")
    base = sweeps_of(settings)["bootstrap_tokens"]
    # Only the batch's DELETE waits, not the block sample that measures the table first (a
    # wait there would let the request in before the batch's snapshot). The pattern is split
    # so that the predicate's own text, in every statement, does not match it.
    slowed = replace(
        base,
        predicate=reviewed(
            base.table,
            f"({base.predicate.text}) AND CASE WHEN current_query() LIKE '%%' || 'DELETE' || "
            "' FROM%%' THEN (SELECT public.wait_at_gate()) ELSE true END",
            base.cutoffs,
        ),
    )
    inserted = threading.Event()
    errors: list[BaseException] = []

    def insert_while_the_batch_waits() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as w:
                try:
                    wait_for(
                        "the batch waiting at the gate",
                        lambda: scalar(
                            w,
                            "SELECT count(*) FROM pg_stat_activity"
                            " WHERE application_name = 'reaper'"
                            " AND datname = current_database() AND wait_event = 'PgSleep'"
                            " AND query LIKE '%%DELETE FROM%%'",
                        ),
                        limit=30,
                    )
                    add_request(w, "raced-request", token_id=raced, created_at=NOW)
                    inserted.set()
                finally:
                    w.execute("UPDATE gate SET open = true")
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=insert_while_the_batch_waits, daemon=True)
    thread.start()
    with structlog.testing.capture_logs() as logs, open_database(settings) as db:
        result = run_sweep(db, slowed, engine_options(settings), now=NOW)
    thread.join(timeout=30)
    assert not errors and inserted.is_set()
    # The foreign key refused the first attempt; the batch was split, and the smaller retries
    # (each a new statement, which sees the new request) deleted the other tokens.
    assert any(e["event"] == "batch_split" and e["reason"] == "foreign_key" for e in logs), logs
    assert not any(e["event"] == "row_skipped" for e in logs), logs
    check_tokens(conn, result)


def test_requests_and_tokens_in_one_run_under_a_stream_of_new_requests(
    dsn, conn, make_settings
) -> None:
    """Writers keep inserting requests for random expired tokens while requests and tokens
    are swept: every committed request survives, no token it references is gone, and both
    sweeps succeed."""
    ids = [add_token(conn, f"t-{i}", expires_at=NOW - timedelta(days=90)) for i in range(300)]
    for i, token in enumerate(ids[:150]):
        add_request(conn, f"stale-{i}", token_id=token, created_at=NOW - timedelta(days=90))
    settings = make_settings(batch_size=5, strategy="index")
    stop = threading.Event()
    committed: list[str] = []
    failures: list[str] = []

    def insert_requests(seed: int) -> None:
        rng = random.Random(seed)
        with psycopg.connect(dsn, autocommit=True) as w:
            n = 0
            while not stop.is_set():
                n += 1
                peer = f"new-{seed}-{n}"
                try:
                    add_request(w, peer, token_id=rng.choice(ids), created_at=NOW)
                    committed.append(peer)
                except psycopg.errors.ForeignKeyViolation:
                    # The token was deleted before this insert locked it: the enrollment
                    # service sees "unknown token", as if the sweep had run a moment earlier.
                    failures.append(peer)

    threads = [threading.Thread(target=insert_requests, args=(s,), daemon=True) for s in (1, 2)]
    for t in threads:
        t.start()
    sweeps = [sweeps_of(settings)[n] for n in ("enrollment_requests", "bootstrap_tokens")]
    with open_database(settings) as db:
        results = run_sweeps(db, sweeps, engine_options(settings), now=NOW)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert [r.outcome for r in results] == ["success", "success"], [r.error for r in results]
    left = keys(conn, "enrollment_requests")
    assert set(committed) <= left
    assert not any(k.startswith("stale-") for k in left)
    orphans = conn.execute(
        "SELECT count(*) FROM enrollment_requests r"
        " WHERE NOT EXISTS (SELECT 1 FROM bootstrap_tokens t WHERE t.id = r.token_id)"
    ).fetchone()
    assert orphans is not None and orphans[0] == 0
    row = conn.execute("SELECT count(*) FROM bootstrap_tokens").fetchone()
    assert row is not None
    assert results[1].rows == 300 - row[0]

"""Each sweep on a real PostgreSQL: rows past the cutoff go, rows inside it stay, the boundary
holds one second either side, and banned members stay.

The clock is pinned (``run_sweep(now=NOW)``) so cutoffs are exact. Row keys say what the sweep
must do with them: ``go-*`` rows must be deleted, ``stay-*`` rows must survive. Every test runs
with both strategies (heap walk, index batches), which must agree row for row.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from reaper.config.engine import engine_options
from reaper.config.settings import Settings
from reaper.config.sweeps import select
from reaper.db import Database
from reaper.dev import demo
from reaper.engine.run import run_sweep, run_sweeps
from tests.support import (
    BUILTIN_SWEEPS,
    NOW,
    SECOND,
    add_node,
    add_request,
    add_router,
    add_token,
    keys,
    sweeps_of,
)

SESSION = timedelta(hours=72)
NODE = timedelta(days=30)
EPHEMERAL = timedelta(hours=1)

STRATEGIES = pytest.mark.parametrize("strategy", ["heap", "index"])
# The heap walk on one connection and on three (--parallel), and the index path.
WALKS = pytest.mark.parametrize(("strategy", "parallel"), [("heap", 1), ("heap", 3), ("index", 1)])


def sweep_once(database: Database, settings: Settings, name: str) -> int:
    """Run sweep ``name`` at NOW; return the rows it deleted."""
    result = run_sweep(database, sweeps_of(settings)[name], engine_options(settings), now=NOW)
    assert result.outcome == "success", result.error
    assert result.strategy == settings.strategy
    return result.rows


def assert_swept(conn: psycopg.Connection[Any], table: str, before: set[str], rows: int) -> None:
    left = keys(conn, table)
    stay = {k for k in before if k.startswith("stay-")}
    go = {k for k in before if k.startswith("go-")}
    assert stay and go, "a test must seed rows that go and rows that stay"
    assert left == stay, f"deleted {sorted(stay - left)}, kept {sorted(left - stay)}"
    assert rows == len(go)


@STRATEGIES
def test_nodes_session(conn, make_settings, database, strategy) -> None:
    settings = make_settings(strategy=strategy)
    cut = NOW - SESSION
    add_node(conn, "go-lapsed-1s-past", enrolled_at=NOW - NODE * 3, expires_at=cut - SECOND)
    add_node(conn, "go-lapsed-10d", enrolled_at=NOW - NODE * 3, expires_at=NOW - timedelta(days=10))
    add_node(conn, "stay-lapsed-1s-inside", enrolled_at=NOW - NODE * 3, expires_at=cut + SECOND)
    add_node(conn, "stay-at-cutoff", enrolled_at=NOW - NODE * 3, expires_at=cut)
    add_node(conn, "stay-active", enrolled_at=NOW - NODE * 3, expires_at=NOW + timedelta(hours=1))
    add_node(conn, "stay-banned", enrolled_at=NOW - NODE * 3, expires_at=NOW - NODE, banned=True)
    # A bootstrap member silent for long is another sweep's business.
    add_node(conn, "stay-bootstrap-silent", enrolled_at=NOW - NODE * 3)
    before = keys(conn, "nodes")
    rows = sweep_once(database, settings, "nodes_session")
    assert_swept(conn, "nodes", before, rows)


@STRATEGIES
def test_nodes_silent(conn, make_settings, database, strategy) -> None:
    settings = make_settings(strategy=strategy)
    cut = NOW - NODE
    add_node(conn, "go-silent-1s-past", enrolled_at=cut - SECOND)
    add_node(conn, "go-silent-60d", enrolled_at=NOW - timedelta(days=60))
    add_node(conn, "stay-silent-1s-inside", enrolled_at=cut + SECOND)
    add_node(conn, "stay-at-cutoff", enrolled_at=cut)
    add_node(conn, "stay-banned", enrolled_at=NOW - timedelta(days=60), banned=True)
    # Ephemeral members have their own sweep; a session member is judged by its session.
    add_node(conn, "stay-ephemeral", enrolled_at=NOW - timedelta(days=60), ephemeral=True)
    add_node(
        conn,
        "stay-session-active",
        enrolled_at=NOW - timedelta(days=60),
        expires_at=NOW + timedelta(hours=1),
    )
    before = keys(conn, "nodes")
    rows = sweep_once(database, settings, "nodes_silent")
    assert_swept(conn, "nodes", before, rows)


@STRATEGIES
def test_nodes_ephemeral(conn, make_settings, database, strategy) -> None:
    settings = make_settings(strategy=strategy)
    cut = NOW - EPHEMERAL
    add_node(conn, "go-1s-past", enrolled_at=cut - SECOND, ephemeral=True)
    add_node(conn, "go-2d", enrolled_at=NOW - timedelta(days=2), ephemeral=True)
    add_node(conn, "stay-1s-inside", enrolled_at=cut + SECOND, ephemeral=True)
    add_node(conn, "stay-at-cutoff", enrolled_at=cut, ephemeral=True)
    add_node(conn, "stay-banned", enrolled_at=NOW - timedelta(days=2), ephemeral=True, banned=True)
    # A regular member silent for two hours is well inside the (30 d) node retention.
    add_node(conn, "stay-regular-2h", enrolled_at=NOW - timedelta(hours=2))
    add_node(conn, "stay-regular-2d", enrolled_at=NOW - timedelta(days=2))
    before = keys(conn, "nodes")
    rows = sweep_once(database, settings, "nodes_ephemeral")
    assert_swept(conn, "nodes", before, rows)


@STRATEGIES
def test_ephemeral_and_regular_members_use_their_own_retention(
    conn, make_settings, database, strategy
) -> None:
    """The three node sweeps together: each member goes by exactly one rule, counted once."""
    settings = make_settings(strategy=strategy)
    add_node(conn, "go-ephemeral-2h", enrolled_at=NOW - timedelta(hours=2), ephemeral=True)
    add_node(conn, "stay-regular-2h", enrolled_at=NOW - timedelta(hours=2))
    add_node(conn, "go-regular-31d", enrolled_at=NOW - timedelta(days=31))
    add_node(conn, "go-ephemeral-31d", enrolled_at=NOW - timedelta(days=31), ephemeral=True)
    add_node(conn, "stay-banned-ephemeral", enrolled_at=NOW - NODE * 2, ephemeral=True, banned=True)
    add_node(conn, "stay-banned-regular", enrolled_at=NOW - NODE * 2, banned=True)
    add_node(
        conn,
        "stay-banned-session",
        enrolled_at=NOW - NODE * 2,
        expires_at=NOW - NODE,
        banned=True,
    )
    add_node(conn, "go-session", enrolled_at=NOW - NODE * 2, expires_at=NOW - NODE)
    before = keys(conn, "nodes")
    sweeps = [sweeps_of(settings)[n] for n in ("nodes_session", "nodes_silent", "nodes_ephemeral")]
    results = run_sweeps(database, sweeps, engine_options(settings), now=NOW)
    assert {r.sweep: r.rows for r in results} == {
        "nodes_session": 1,
        "nodes_silent": 1,
        "nodes_ephemeral": 2,
    }
    assert_swept(conn, "nodes", before, sum(r.rows for r in results))


@STRATEGIES
def test_enrollment_requests(conn, make_settings, database, strategy) -> None:
    settings = make_settings(strategy=strategy)
    cut, eph_cut = NOW - NODE, NOW - EPHEMERAL
    regular = add_token(conn, "regular", expires_at=NOW + NODE)
    ephemeral = add_token(conn, "ephemeral", expires_at=NOW + NODE, ephemeral=True)
    long_ago = NOW - timedelta(days=90)
    for token, label in ((regular, "regular"), (None, "no-token")):
        add_request(
            conn,
            f"go-{label}-resolved-1s-past",
            token_id=token,
            created_at=long_ago,
            resolved_at=cut - SECOND,
        )
        add_request(
            conn,
            f"stay-{label}-resolved-1s-inside",
            token_id=token,
            created_at=long_ago,
            resolved_at=cut + SECOND,
        )
        add_request(
            conn,
            f"stay-{label}-resolved-at-cutoff",
            token_id=token,
            created_at=long_ago,
            resolved_at=cut,
        )
        add_request(conn, f"go-{label}-pending-1s-past", token_id=token, created_at=cut - SECOND)
        add_request(
            conn, f"stay-{label}-pending-1s-inside", token_id=token, created_at=cut + SECOND
        )
        # Created long ago but resolved lately: resolved_at decides, not created_at.
        add_request(
            conn,
            f"stay-{label}-resolved-lately",
            token_id=token,
            created_at=long_ago,
            resolved_at=NOW - timedelta(days=1),
        )
        # Well past the ephemeral retention, well inside the regular one.
        add_request(
            conn,
            f"stay-{label}-resolved-2h",
            token_id=token,
            created_at=NOW - timedelta(hours=3),
            resolved_at=NOW - timedelta(hours=2),
        )
    # Requests of an ephemeral token use the short (1 h) retention.
    add_request(
        conn,
        "go-eph-resolved-1s-past",
        token_id=ephemeral,
        created_at=NOW - timedelta(hours=3),
        resolved_at=eph_cut - SECOND,
    )
    add_request(
        conn,
        "stay-eph-resolved-1s-inside",
        token_id=ephemeral,
        created_at=NOW - timedelta(hours=3),
        resolved_at=eph_cut + SECOND,
    )
    add_request(conn, "go-eph-pending-1s-past", token_id=ephemeral, created_at=eph_cut - SECOND)
    add_request(conn, "stay-eph-pending-1s-inside", token_id=ephemeral, created_at=eph_cut + SECOND)
    add_request(
        conn,
        "stay-eph-resolved-lately",
        token_id=ephemeral,
        created_at=NOW - timedelta(hours=3),
        resolved_at=NOW - timedelta(minutes=30),
    )
    add_request(
        conn,
        "go-eph-resolved-40d",
        token_id=ephemeral,
        created_at=long_ago,
        resolved_at=NOW - timedelta(days=40),
    )
    before = keys(conn, "enrollment_requests")
    # The requests of ephemeral tokens are enrollment_requests_ephemeral's, and also
    # enrollment_requests' once past node_retention.
    stale = sweep_once(database, settings, "enrollment_requests")
    assert before - keys(conn, "enrollment_requests") == {
        k for k in before if k.startswith("go-") and ("-eph-" not in k or k.endswith("-40d"))
    }
    ephemeral = sweep_once(database, settings, "enrollment_requests_ephemeral")
    assert_swept(conn, "enrollment_requests", before, stale + ephemeral)
    assert ephemeral == 2


@STRATEGIES
def test_bootstrap_tokens(conn, make_settings, database, strategy) -> None:
    settings = make_settings(strategy=strategy)
    cut = NOW - NODE
    add_token(conn, "go-expired-1s-past", expires_at=cut - SECOND)
    add_token(conn, "go-expired-1y", expires_at=NOW - timedelta(days=365), ephemeral=True)
    add_token(conn, "stay-expired-1s-inside", expires_at=cut + SECOND)
    add_token(conn, "stay-at-cutoff", expires_at=cut)
    add_token(conn, "stay-live", expires_at=NOW + NODE)
    # Expired long ago, but requests (stale or not, any status) still reference them.
    for label, created, resolved in (
        ("recent-pending", NOW - timedelta(hours=1), None),
        ("stale-pending", NOW - timedelta(days=300), None),
        ("stale-resolved", NOW - timedelta(days=300), NOW - timedelta(days=299)),
    ):
        token = add_token(conn, f"stay-referenced-{label}", expires_at=NOW - timedelta(days=200))
        add_request(conn, f"req-{label}", token_id=token, created_at=created, resolved_at=resolved)
    before = keys(conn, "bootstrap_tokens")
    rows = sweep_once(database, settings, "bootstrap_tokens")
    assert_swept(conn, "bootstrap_tokens", before, rows)
    assert len(keys(conn, "enrollment_requests")) == 3


@STRATEGIES
def test_router_leases(conn, make_settings, database, strategy) -> None:
    settings = make_settings(strategy=strategy)
    cut = NOW - NODE
    add_router(conn, "go-1s-past", lease_expires_at=cut - SECOND)
    add_router(conn, "go-90d", lease_expires_at=NOW - timedelta(days=90))
    add_router(conn, "stay-1s-inside", lease_expires_at=cut + SECOND)
    add_router(conn, "stay-at-cutoff", lease_expires_at=cut)
    add_router(conn, "stay-live", lease_expires_at=NOW + timedelta(seconds=30))
    # Expired a day ago: the lease lapsed, but the row is kept for the retention.
    add_router(conn, "stay-lapsed-1d", lease_expires_at=NOW - timedelta(days=1))
    before = keys(conn, "routers")
    rows = sweep_once(database, settings, "router_leases")
    assert_swept(conn, "routers", before, rows)


@STRATEGIES
def test_token_referenced_only_by_stale_requests_goes_in_the_same_run(
    conn, make_settings, database, strategy
) -> None:
    settings = make_settings(strategy=strategy)
    old = NOW - timedelta(days=200)
    stale_only = add_token(conn, "go-stale-only", expires_at=old)
    mixed = add_token(conn, "stay-mixed", expires_at=old)
    add_token(conn, "go-unreferenced", expires_at=old)
    for i in range(3):
        add_request(
            conn, f"go-stale-{i}", token_id=stale_only, created_at=old, resolved_at=old + SECOND
        )
    add_request(conn, "go-mixed-stale", token_id=mixed, created_at=old, resolved_at=old)
    add_request(conn, "stay-mixed-recent", token_id=mixed, created_at=NOW - timedelta(days=1))
    tokens_before, requests_before = (
        keys(conn, "bootstrap_tokens"),
        keys(conn, "enrollment_requests"),
    )
    # Asked for tokens first: the engine still runs the requests first.
    chosen = select(BUILTIN_SWEEPS, ["bootstrap_tokens", "enrollment_requests"])
    results = run_sweeps(database, chosen, engine_options(settings), now=NOW)
    assert [r.sweep for r in results] == ["enrollment_requests", "bootstrap_tokens"]
    assert all(r.outcome == "success" for r in results), [r.error for r in results]
    by = {r.sweep: r.rows for r in results}
    assert_swept(conn, "enrollment_requests", requests_before, by["enrollment_requests"])
    assert_swept(conn, "bootstrap_tokens", tokens_before, by["bootstrap_tokens"])


@pytest.mark.parametrize("batch_size", [1, 3, 1000])
@WALKS
def test_batches_add_up(conn, make_settings, database, strategy, parallel, batch_size) -> None:
    """However the garbage is cut into batches, every row goes once and every batch is short."""
    settings = make_settings(strategy=strategy, batch_size=batch_size, parallel=parallel)
    old = NOW - timedelta(days=60)
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at, banned)"
        " SELECT CASE WHEN i %% 4 = 0 THEN 'stay-banned-' ELSE 'go-' END || i, %s, i %% 4 = 0"
        " FROM generate_series(1, 200) i",
        (old,),
    )
    before = keys(conn, "nodes")
    result = run_sweep(
        database, sweeps_of(settings)["nodes_silent"], engine_options(settings), now=NOW
    )
    assert result.outcome == "success", result.error
    assert_swept(conn, "nodes", before, result.rows)
    if strategy == "index":
        assert result.batches >= result.rows // batch_size


def test_dry_run_counts_and_deletes_nothing(conn, make_settings, database: Database) -> None:
    settings: Settings = make_settings()
    add_node(conn, "a", enrolled_at=NOW - timedelta(days=60))
    add_node(conn, "b", enrolled_at=NOW - timedelta(days=60))
    add_node(conn, "c", enrolled_at=NOW)
    result = run_sweep(
        database,
        sweeps_of(settings)["nodes_silent"],
        engine_options(settings),
        now=NOW,
        dry_run=True,
    )
    assert (result.outcome, result.rows, result.dry_run) == ("success", 2, True)
    assert keys(conn, "nodes") == {"a", "b", "c"}


def test_cutoffs_come_from_the_database_clock(conn, database, settings) -> None:
    """Unpinned, the cutoff is the server's now() minus the retention, computed once."""
    db_now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    result = run_sweep(
        database, sweeps_of(settings)["enrollment_requests"], engine_options(settings)
    )
    assert result.outcome == "success"
    assert set(result.cutoffs) == {"cutoff"}
    assert abs(result.cutoffs["cutoff"] + NODE - db_now) < timedelta(seconds=30)


@WALKS
def test_a_run_stops_at_its_row_budget_after_the_batch_in_flight(
    conn, make_settings, database, strategy, parallel
) -> None:
    settings = make_settings(
        strategy=strategy, batch_size=10, max_rows_per_run=25, parallel=parallel
    )
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at) SELECT 'go-' || i, %s"
        " FROM generate_series(1, 2000) i",
        (NOW - timedelta(days=60),),
    )
    # Analyzed: the heap walk sizes its ranges from the table (unanalyzed, its first range is
    # 64 blocks, here the whole table in one batch whatever the batch size).
    conn.execute("ANALYZE nodes")
    result = run_sweep(
        database, sweeps_of(settings)["nodes_silent"], engine_options(settings), now=NOW
    )
    assert (result.outcome, result.stopped_by) == ("success", "max_rows")
    assert result.rows >= 25
    assert len(keys(conn, "nodes")) == 2000 - result.rows > 0
    if strategy == "index":
        assert (result.rows, result.batches) == (30, 3)


def test_a_stop_request_ends_the_run_between_batches(conn, make_settings, database) -> None:
    import threading

    settings = make_settings(strategy="index", batch_size=10)
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at) SELECT 'go-' || i, %s"
        " FROM generate_series(1, 100) i",
        (NOW - timedelta(days=60),),
    )
    stop = threading.Event()
    result = run_sweep(
        database,
        sweeps_of(settings)["nodes_silent"],
        engine_options(settings),
        now=NOW,
        stop=stop,
        on_batch=lambda r: r.batches == 2 and stop.set(),
    )
    assert (result.stopped_by, result.rows, result.batches) == ("stop", 20, 2)
    assert len(keys(conn, "nodes")) == 80


def test_rows_that_two_builtin_sweeps_share(conn, dsn) -> None:
    """Where built-in sweeps share a table, no node is eligible for two of them, and the only
    request eligible for both request sweeps is one of an ephemeral token that is also older
    than node_retention (docs/sweeps.md): whichever runs first deletes it."""
    demo.seed(
        dsn,
        demo.Sizes(
            requests_stale=500,
            requests_recent=50,
            nodes_silent=300,
            nodes_live=50,
            nodes_session_lapsed=200,
            nodes_session_kept=20,
            nodes_ephemeral_silent=100,
            nodes_ephemeral_live=20,
        ),
    )
    ephemeral = add_token(conn, "eph", expires_at=NOW + NODE, ephemeral=True)
    db_now = conn.execute("SELECT now()").fetchone()[0]
    add_request(conn, "both-pending", token_id=ephemeral, created_at=db_now - 2 * NODE)
    add_request(
        conn,
        "both-resolved",
        token_id=ephemeral,
        created_at=db_now - 3 * NODE,
        resolved_at=db_now - 2 * NODE,
    )
    key = {"nodes": "peer_id", "enrollment_requests": "peer_id"}
    eligible: dict[str, set[str]] = {}
    for s in BUILTIN_SWEEPS:
        if s.table in key:
            cutoffs = {p: db_now - r for p, r in s.retentions.items()}
            eligible[s.name] = {
                r[0]
                for r in conn.execute(
                    f"SELECT {key[s.table]} FROM {s.table}"
                    f" WHERE ({s.predicate.where.as_string(conn)})",
                    cutoffs,
                )
            }
            assert eligible[s.name], s.name
    nodes = [s.name for s in BUILTIN_SWEEPS if s.table == "nodes"]
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            assert not eligible[a] & eligible[b], (a, b)
    both = eligible["enrollment_requests"] & eligible["enrollment_requests_ephemeral"]
    assert both == {"both-pending", "both-resolved"}

"""The request sweep is the design's predicate, ``resolved_at < cutoff OR (resolved_at IS NULL
AND created_at < cutoff)``, served by plain indexes (resolved_at; created_at of the pending
requests), each arm read as an ordered range of its own index that stops at its LIMIT: no
batch, first victim or gauge reads every eligible entry (a BitmapOr) before its LIMIT. The
same holds for every declared sweep whose rule has several age columns (the same compiler),
here one of three age columns with a filter and a reference.

Plans are read with EXPLAIN ANALYZE, as the statements run (after index_batch_settings.sql,
in one transaction, rolled back), on a few thousand rows: an arm's index scan must return at
most the LIMIT, and an arm that the ones before it filled must never run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from reaper import sqltext
from reaper.config.engine import engine_options
from reaper.config.settings import Settings, build_settings
from reaper.config.sweeps import Sweep
from reaper.db import Database, SweepStatements
from reaper.engine.clock import compute_cutoffs
from reaper.engine.run import run_sweep
from tests.support import NOW, TEST_DEFAULTS, credentials, keys, sweeps_of
from tests.support.checks import failed, findings_of
from tests.support.ops import apply_grants, run_json

NODE = timedelta(days=30)
ARM_INDEXES = ("enrollment_requests_resolved_at_idx", "enrollment_requests_pending_created_at_idx")
# Rows of each arm past the cutoff, and live ones.
RESOLVED_OLD = 1500
PENDING_OLD = 1200
LIVE = 3000
# What must never appear on the swept table: a scan of every eligible entry, or a sort of them.
EVERYTHING = ("Seq Scan", "Bitmap Heap Scan", "Bitmap Index Scan", "BitmapOr", "Sort")

SEED = """
INSERT INTO enrollment_requests (token_id, peer_id, status, created_at, resolved_at)
SELECT NULL, 'go-resolved-' || i, 'approved', %(now)s - interval '90 days',
       %(now)s - interval '31 days' - i * interval '1 minute'
FROM generate_series(1, %(resolved)s) i;
INSERT INTO enrollment_requests (token_id, peer_id, status, created_at, resolved_at)
SELECT NULL, 'go-pending-' || i, 'pending', %(now)s - interval '40 days' - i * interval '1 minute',
       NULL
FROM generate_series(1, %(pending)s) i;
INSERT INTO enrollment_requests (token_id, peer_id, status, created_at, resolved_at)
SELECT NULL, 'stay-' || i, CASE WHEN i %% 3 = 0 THEN 'pending' ELSE 'approved' END,
       CASE WHEN i %% 3 = 1 THEN %(now)s - interval '90 days'
            ELSE %(now)s - interval '1 day' END,
       CASE WHEN i %% 3 = 0 THEN NULL ELSE %(now)s - interval '1 day' END
FROM generate_series(1, %(live)s) i;
"""
# The oldest eligible request is pending: it was created before any request was resolved.
OLDEST_PENDING = NOW - timedelta(days=40) - PENDING_OLD * timedelta(minutes=1)


def seed(conn: psycopg.Connection[Any]) -> None:
    """The requests: resolved past the cutoff (go), pending and created past it (go), and live
    ones (stay), among them requests created long ago but resolved lately (stay: resolved_at
    decides, not created_at)."""
    params = {"now": NOW, "resolved": RESOLVED_OLD, "pending": PENDING_OLD, "live": LIVE}
    for stmt in SEED.strip().rstrip(";").split(";\n"):
        conn.execute(stmt, params)  # type: ignore[call-overload]
    conn.execute("ANALYZE enrollment_requests")


def request_sweep(settings: Settings) -> Sweep:
    return sweeps_of(settings)["enrollment_requests"]


def nodes(
    plan: dict[str, Any], above: tuple[dict[str, Any], ...] = ()
) -> Iterator[tuple[dict[str, Any], tuple[dict[str, Any], ...]]]:
    """Every plan node with the nodes above it, nearest first."""
    yield plan, above
    for child in plan.get("Plans", ()):
        yield from nodes(child, (plan, *above))


def analyzed(
    conn: psycopg.Connection[Any], statement: sql.Composable, params: dict[str, Any]
) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, FORMAT JSON) of ``statement`` as reaper runs it (after
    index_batch_settings.sql), in a transaction rolled back: its top plan node."""
    with conn.transaction(force_rollback=True):
        conn.execute(sql.SQL(sqltext.engine("index_batch_settings")))
        row = conn.execute(
            sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) {}").format(statement), params
        ).fetchone()
    assert row is not None
    return row[0][0]["Plan"]  # type: ignore[no-any-return]


def arm_scans(
    plan: dict[str, Any], table: str, indexes: tuple[str, ...]
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each arm's (Limit, index scan) of ``table`` by index name, after checking the plan's
    shape: nothing in EVERYTHING anywhere (but on other tables); every read of ``table`` that
    finds rows is an index scan of one of ``indexes`` with a Limit above it within its arm
    (below the Append of the arms); and each of ``indexes`` is read once."""
    shape = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n, _ in nodes(plan)]
    scans: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for node, above in nodes(plan):
        if node["Node Type"] in EVERYTHING:
            assert node.get("Relation Name") not in (table, None), shape
        if node.get("Relation Name") != table or node["Node Type"] in ("ModifyTable", "Tid Scan"):
            continue
        assert node["Node Type"] in ("Index Scan", "Index Only Scan"), shape
        arm = above[
            : next((i for i, n in enumerate(above) if n["Node Type"] == "Append"), len(above))
        ]
        limit = next((n for n in arm if n["Node Type"] == "Limit"), None)
        assert limit is not None, shape
        assert node["Index Name"] in indexes and node["Index Name"] not in scans, shape
        scans[node["Index Name"]] = (limit, node)
    assert set(scans) == set(indexes), shape
    return scans


def returned(node: dict[str, Any]) -> int:
    """Rows a plan node returned (0 when it never ran)."""
    return int(node["Actual Rows"]) * int(node["Actual Loops"])


@pytest.fixture
def seeded(
    conn: psycopg.Connection[Any], make_settings: Any, database: Database
) -> tuple[Settings, SweepStatements, dict[str, Any]]:
    seed(conn)
    settings = make_settings()
    sweep = request_sweep(settings)
    with database.session() as session:
        stmts = session.statements(sweep.predicate)
        params = dict(compute_cutoffs(session, sweep, NOW))
    return settings, stmts, params


def test_the_predicate_is_the_designs_with_two_disjoint_arms(settings: Settings) -> None:
    predicate = request_sweep(settings).predicate
    text = predicate.where.as_string(None)
    assert text == (
        '(("resolved_at" OPERATOR(pg_catalog.<) %(cutoff)s)) OR (("resolved_at" IS '
        'NULL) AND ("created_at" OPERATOR(pg_catalog.<) %(cutoff)s))'
    )
    assert "coalesce" not in text.lower()
    assert [a.age.as_string(None) for a in predicate.arms] == ['"resolved_at"', '"created_at"']
    assert request_sweep(settings).indexes == ARM_INDEXES


@pytest.mark.parametrize("limit", [1, 500, RESOLVED_OLD + 300, 10_000])
def test_each_arm_is_an_ordered_index_range_stopped_by_its_limit(
    conn: psycopg.Connection[Any],
    seeded: tuple[Settings, SweepStatements, dict[str, Any]],
    limit: int,
) -> None:
    """The index batch (it deletes, rolled back), the first victim, the backlog count and
    check's plan: the resolved arm first, up to the limit; the pending arm only for what is
    left, up to the limit; never all of either."""
    _, stmts, params = seeded
    heap = stmts.heaps[0]
    statements = {
        "index_batch": (heap.index_batch, dict(params, limit=limit, skip=[])),
        "backlog_rows": (stmts.backlog_rows, dict(params, limit=limit)),
        "index_plan": (stmts.index_plan, dict(params, batch_size=limit)),
    }
    if limit == 1:
        statements["first_victim"] = (heap.index_first_victim, dict(params, skip=[]))
    for name, (statement, p) in statements.items():
        scans = arm_scans(analyzed(conn, statement, p), "enrollment_requests", ARM_INDEXES)
        # What each arm's index scan returned: no more than its share of the limit.
        resolved, pending = (returned(scans[i][1]) for i in ARM_INDEXES)
        assert resolved == min(limit, RESOLVED_OLD), name
        assert pending == min(max(limit - RESOLVED_OLD, 0), PENDING_OLD), name
        if limit <= RESOLVED_OLD:
            assert scans[ARM_INDEXES[1]][1]["Actual Loops"] == 0, f"{name}: the pending arm ran"


def test_the_gauges_read_a_few_entries_and_the_oldest_row_is_exact(
    conn: psycopg.Connection[Any],
    database: Database,
    seeded: tuple[Settings, SweepStatements, dict[str, Any]],
) -> None:
    """The oldest eligible request is a pending one, although the resolved arm alone fills
    --backlog-limit: the oldest-row gauge reads one entry of each arm, in its age's order, and
    is exact; the status command's oldest row too."""
    settings, stmts, params = seeded
    assert stmts.backlog_oldest is not None
    scans = arm_scans(
        analyzed(conn, stmts.backlog_oldest, dict(params, limit=500)),
        "enrollment_requests",
        ARM_INDEXES,
    )
    assert [returned(scans[i][1]) for i in ARM_INDEXES] == [1, 1]
    cutoff = params["cutoff"]
    with database.session() as session:
        assert session.backlog_rows(stmts, params, 500) == 500
        assert session.backlog_rows(stmts, params, 10_000) == RESOLVED_OLD + PENDING_OLD
        oldest = session.backlog_oldest_seconds(stmts, params, settings.backlog_limit)
        assert oldest == pytest.approx((cutoff - OLDEST_PENDING).total_seconds())
        assert session.oldest_eligible(stmts, params) == OLDEST_PENDING


@pytest.mark.parametrize("strategy", ["index", "heap"])
def test_batches_delete_exactly_the_eligible_requests(
    conn: psycopg.Connection[Any], make_settings: Any, database: Database, strategy: str
) -> None:
    """Batches smaller than either arm, so that batches end in each arm and one spans both:
    every request resolved before the cutoff goes, every pending one created before it goes,
    and no other (a request created long ago but resolved lately stays)."""
    seed(conn)
    before = keys(conn, "enrollment_requests")
    settings = make_settings(strategy=strategy, batch_size=700)
    result = run_sweep(database, request_sweep(settings), engine_options(settings), now=NOW)
    assert result.outcome == "success", result.error
    stay = {k for k in before if k.startswith("stay-")}
    assert keys(conn, "enrollment_requests") == stay
    assert result.rows == RESOLVED_OLD + PENDING_OLD
    if strategy == "index":
        assert result.batches >= (RESOLVED_OLD + PENDING_OLD) // 700


# -- a declared sweep of the same kind: three age columns, a filter and a reference ----------

TICKETS = """
CREATE TABLE public.tickets (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key text NOT NULL,
    kind text NOT NULL,
    closed_at timestamptz,
    updated_at timestamptz,
    created_at timestamptz NOT NULL
);
CREATE TABLE public.ticket_holds (ticket_id bigint NOT NULL);
CREATE INDEX tickets_closed_at_idx ON public.tickets (closed_at);
CREATE INDEX tickets_open_updated_at_idx ON public.tickets (updated_at) WHERE closed_at IS NULL;
CREATE INDEX tickets_new_created_at_idx ON public.tickets (created_at)
    WHERE closed_at IS NULL AND updated_at IS NULL;
CREATE INDEX ticket_holds_ticket_id_idx ON public.ticket_holds (ticket_id);
INSERT INTO public.tickets (key, kind, closed_at, updated_at, created_at)
SELECT CASE WHEN i %% 2 = 0 THEN 'go-' ELSE 'stay-' END || 'closed-' || i,
       CASE WHEN i %% 2 = 0 THEN 'support' ELSE 'sales' END,
       %(now)s - interval '60 days', %(now)s - interval '61 days', %(now)s - interval '62 days'
FROM generate_series(1, 800) i;
INSERT INTO public.tickets (key, kind, closed_at, updated_at, created_at)
SELECT 'go-open-' || i, 'support', NULL, %(now)s - interval '45 days', %(now)s - interval '90 days'
FROM generate_series(1, 600) i;
INSERT INTO public.tickets (key, kind, closed_at, updated_at, created_at)
SELECT 'go-new-' || i, 'support', NULL, NULL, %(now)s - interval '50 days'
FROM generate_series(1, 500) i;
INSERT INTO public.tickets (key, kind, closed_at, updated_at, created_at)
SELECT 'stay-' || i, 'support',
       CASE WHEN i %% 3 = 0 THEN %(now)s - interval '1 day' END,
       CASE WHEN i %% 3 = 0 THEN %(now)s - interval '61 days'
            WHEN i %% 3 = 1 THEN %(now)s - interval '1 day' END,
       CASE WHEN i %% 3 = 2 THEN %(now)s - interval '1 day' ELSE %(now)s - interval '90 days' END
FROM generate_series(1, 2000) i;
INSERT INTO public.tickets (key, kind, closed_at, updated_at, created_at)
SELECT 'stay-held-' || i, 'support', %(now)s - interval '35 days', NULL,
       %(now)s - interval '90 days'
FROM generate_series(1, 5) i;
INSERT INTO public.ticket_holds (ticket_id)
SELECT id FROM public.tickets WHERE key LIKE 'stay-held-%%';
ANALYZE public.tickets;
ANALYZE public.ticket_holds
"""
HELD = 5
TICKET_INDEXES = (
    "tickets_closed_at_idx",
    "tickets_open_updated_at_idx",
    "tickets_new_created_at_idx",
)


def seed_tickets(conn: psycopg.Connection[Any]) -> None:
    for stmt in TICKETS.strip().split(";\n"):
        conn.execute(stmt, {"now": NOW})  # type: ignore[call-overload]


def tickets_settings(dsn: str, **values: Any) -> Settings:
    return build_settings(
        {"dsn": dsn, **TEST_DEFAULTS, **values},
        {
            "sweeps": {
                "tickets": {
                    "table": "public.tickets",
                    "reason": "stale",
                    "retention": "30d",
                    "age": ["closed_at", "updated_at", "created_at"],
                    "where": {"kind": "support"},
                    "keep_referenced": [
                        {"table": "public.ticket_holds", "column": "ticket_id", "key": "id"}
                    ],
                }
            }
        },
    )


@pytest.mark.fresh_db
@pytest.mark.parametrize("limit", [300, 1000, 5000])
def test_a_declared_sweep_of_three_ages_reads_three_ordered_ranges(
    dsn: str, conn: psycopg.Connection[Any], database: Database, limit: int
) -> None:
    seed_tickets(conn)
    sweep = sweeps_of(tickets_settings(dsn))["tickets"]
    assert len(sweep.predicate.arms) == 3
    with database.session() as session:
        stmts = session.statements(sweep.predicate)
        params = dict(compute_cutoffs(session, sweep, NOW))
    eligible = (400, 600, 500)  # closed support tickets (none held), open, new
    for statement, p in (
        (stmts.heaps[0].index_batch, dict(params, limit=limit, skip=[])),
        (stmts.backlog_rows, dict(params, limit=limit)),
    ):
        scans = arm_scans(analyzed(conn, statement, p), "tickets", TICKET_INDEXES)
        left = limit
        for index, rows in zip(TICKET_INDEXES, eligible, strict=True):
            arm, scan = scans[index]
            assert returned(arm) == min(left, rows), (index, limit)
            # The scan may also return the held tickets, which the reference then drops.
            assert returned(scan) <= min(left, rows) + HELD, (index, limit)
            left -= min(left, rows)


@pytest.mark.fresh_db
def test_a_declared_sweep_of_three_ages_deletes_exactly_its_rows(
    dsn: str, conn: psycopg.Connection[Any], database: Database
) -> None:
    seed_tickets(conn)
    before = {r[0] for r in conn.execute("SELECT key FROM public.tickets")}
    settings = tickets_settings(dsn, strategy="index", batch_size=250)
    result = run_sweep(database, sweeps_of(settings)["tickets"], engine_options(settings), now=NOW)
    assert result.outcome == "success", result.error
    left = {r[0] for r in conn.execute("SELECT key FROM public.tickets")}
    assert left == {k for k in before if k.startswith("stay-")}
    assert result.rows == 400 + 600 + 500


# -- reaper check -------------------------------------------------------------------------------


@pytest.mark.fresh_db
@pytest.mark.parametrize("dropped", ARM_INDEXES)
def test_check_explains_both_indexes_and_names_the_missing_one(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str], dropped: str
) -> None:
    seed(conn)
    reaper_dsn = apply_grants(dsn)
    args = ("check", "--dsn", reaper_dsn, "--sweep", "enrollment_requests")
    code, doc = run_json(capsys, *args)
    assert (code, failed(doc)) == (0, [])
    assert {f["subject"]: f["status"] for f in findings_of(doc, check="index")} == {
        i: "pass" for i in ARM_INDEXES
    }
    plan = findings_of(doc, check="plan")[0]
    assert plan["status"] == "pass" and all(i in plan["detail"] for i in ARM_INDEXES), plan

    conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier("public", dropped)))
    code, doc = run_json(capsys, *args)
    assert code == 1
    assert failed(doc) == [("enrollment_requests", "index", dropped)]
    missing = findings_of(doc, check="index", subject=dropped)[0]
    assert "does not exist" in missing["detail"] and missing["fix"] == "reaper indexes ensure"

    code, _ = run_json(capsys, "indexes", "ensure", "--dsn", dsn)
    assert code == 0
    code, doc = run_json(capsys, *args)
    assert (code, failed(doc)) == (0, [])


# -- upgrading: the former expression index ----------------------------------------------------

SWEEPS_PAGE = Path(__file__).resolve().parents[3] / "docs" / "sweeps.md"
FORMER_INDEX = "enrollment_requests_resolved_or_created_idx"


@pytest.mark.fresh_db
def test_the_documented_drop_of_the_former_index_runs(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """docs/sweeps.md's command, as written, drops the expression index that the sweep used
    to rely on; the sweep's own indexes stay."""
    psql = shutil.which("psql")
    if psql is None:
        pytest.skip("psql is not installed")
    conn.execute(
        f"CREATE INDEX {FORMER_INDEX} ON public.enrollment_requests "
        "((coalesce(resolved_at, created_at)))"
    )
    line = next(
        text
        for text in SWEEPS_PAGE.read_text().splitlines()
        if text.startswith("psql ") and FORMER_INDEX in text
    )
    env = {**os.environ, **credentials(), "REAPER_DSN": dsn}
    done = subprocess.run(
        ["bash", "-c", line], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    present = {
        r[0]
        for r in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'enrollment_requests'"
        )
    }
    assert FORMER_INDEX not in present and set(ARM_INDEXES) <= present

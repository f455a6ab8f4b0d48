"""Deleted is not freed, on a throwaway primary and its streaming standby: a replication slot
that carries the standby's hot_standby_feedback, then a prepared transaction, and the feedback
of a standby without a slot, each named by ``status`` and ``check`` as what keeps the rows
reaper deleted (an open transaction: tests/db/commands/test_space.py)."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

from bench import replica
from reaper.dev import devserver
from tests.support.daemon import wait_for
from tests.support.ops import run_cli, run_json
from tests.support.space import GARBAGE, space_of, sweep_routers

# Every test here makes its own servers.
pytestmark = pytest.mark.fresh_db

SLOT = "standby_slot"
GID = "payment-42"


def _slot_xmin_age(conn: psycopg.Connection[Any]) -> int | None:
    row = conn.execute(
        "SELECT age(xmin) FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _findings(capsys: pytest.CaptureFixture[str], dsn: str) -> list[dict[str, Any]]:
    _, checked = run_json(capsys, "check", "--dsn", dsn, "--sweep", "router_leases")
    return [f for f in checked["findings"] if f["check"] == "space"]


@pytest.mark.slow
def test_a_replication_slot_and_a_prepared_transaction_are_named_as_the_holders(
    capsys: pytest.CaptureFixture[str],
) -> None:
    reason = replica.why_unavailable()
    if reason:
        pytest.skip(reason)
    with replica.primary_and_standby(
        slot=SLOT, hot_standby_feedback="on", max_prepared_transactions="4", fsync="off"
    ) as pair:
        name = f"reaper_space_{uuid.uuid4().hex[:6]}"
        dsn = devserver.create_database(pair.primary, name)
        devserver.load_schema(dsn)
        replica.wait_streaming(pair.primary)
        with (
            psycopg.connect(pair.primary, autocommit=True) as primary,
            psycopg.connect(devserver.with_dbname(pair.standby, name)) as reader,
        ):
            # A long query on the standby: its snapshot travels to the primary as the
            # standby's feedback, which the slot keeps.
            reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            reader.execute("SELECT count(*) FROM public.routers").fetchone()
            wait_for("the slot's xmin", lambda: _slot_xmin_age(primary) is not None)

            sweep_routers(capsys, dsn)
            code, status = run_json(capsys, "status", "--dsn", dsn, "--sweep", "router_leases")
            assert code == 0
            space = space_of(status)
            assert (space["dead_rows"], space["verdict"]) == (GARBAGE, "held")
            holder = space["horizon_holder"]
            assert (holder["kind"], holder["name"], holder["state"]) == (
                "replication_slot",
                SLOT,
                "active",
            )
            _, out, _ = run_cli(capsys, "status", "--dsn", dsn, "--sweep", "router_leases")
            line = next(ln for ln in out.splitlines() if ln.startswith("space: routers:"))
            assert f"replication slot '{SLOT}' (active;" in line
            found = _findings(capsys, dsn)
            assert [f["status"] for f in found] == ["warn"]
            assert f"replication slot '{SLOT}'" in found[0]["detail"]
            assert f"pg_drop_replication_slot('{SLOT}')" in found[0]["fix"]

            # The standby's query ends; a prepared transaction is left open on the primary.
            reader.rollback()
            with psycopg.connect(dsn, autocommit=True) as tm:
                tm.execute("BEGIN")
                tm.execute(
                    "INSERT INTO public.routers (router_id, address, lease_expires_at) "
                    "VALUES ('in-doubt', 'a', now() + interval '1 hour')"
                )
                tm.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(GID)))

            # The standby sees the prepared transaction as running, so its feedback (and
            # the slot) stops at it too: the prepared transaction is the cause, named first.
            def prepared_age() -> int:
                return int(
                    primary.execute(
                        "SELECT age(transaction) FROM pg_prepared_xacts WHERE gid = %s", (GID,)
                    ).fetchone()[0]
                )  # type: ignore[index]

            wait_for(
                "the slot to move up to the prepared transaction",
                lambda: (_slot_xmin_age(primary) or 0) <= prepared_age(),
            )
            sweep_routers(capsys, dsn, prefix="second-")
            code, status = run_json(capsys, "status", "--dsn", dsn, "--sweep", "router_leases")
            space = space_of(status)
            assert space["verdict"] == "held"
            assert space["dead_rows"] >= GARBAGE
            holder = space["horizon_holder"]
            assert (holder["kind"], holder["name"], holder["user"]) == (
                "prepared_transaction",
                GID,
                "postgres",
            )
            assert holder["since"] is not None
            found = _findings(capsys, dsn)
            assert f"prepared transaction '{GID}'" in found[0]["detail"]
            assert f"ROLLBACK PREPARED '{GID}'" in found[0]["fix"]
            with psycopg.connect(dsn, autocommit=True) as tm:
                tm.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(GID)))


@pytest.mark.slow
def test_a_standbys_feedback_without_a_slot_is_named_as_the_holder(
    capsys: pytest.CaptureFixture[str],
) -> None:
    reason = replica.why_unavailable()
    if reason:
        pytest.skip(reason)
    with replica.primary_and_standby(hot_standby_feedback="on", fsync="off") as pair:
        name = f"reaper_space_{uuid.uuid4().hex[:6]}"
        dsn = devserver.create_database(pair.primary, name)
        devserver.load_schema(dsn)
        replica.wait_streaming(pair.primary)
        with (
            psycopg.connect(pair.primary, autocommit=True) as primary,
            psycopg.connect(devserver.with_dbname(pair.standby, name)) as reader,
        ):
            reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            reader.execute("SELECT count(*) FROM public.routers").fetchone()
            # Without a slot the feedback sits on the standby's WAL sender.
            wait_for(
                "the WAL sender's xmin",
                lambda: (
                    primary.execute(
                        "SELECT backend_xmin IS NOT NULL FROM pg_stat_replication "
                        "WHERE application_name = %s",
                        (replica.STANDBY_NAME,),
                    ).fetchone()
                    == (True,)
                ),
            )

            sweep_routers(capsys, dsn)
            code, status = run_json(capsys, "status", "--dsn", dsn, "--sweep", "router_leases")
            assert code == 0
            space = space_of(status)
            assert (space["dead_rows"], space["verdict"]) == (GARBAGE, "held")
            holder = space["horizon_holder"]
            assert (holder["kind"], holder["name"]) == ("standby", replica.STANDBY_NAME)
            found = _findings(capsys, dsn)
            assert f"standby '{replica.STANDBY_NAME}'" in found[0]["detail"]
            assert "hot_standby_feedback off" in found[0]["fix"]

            # Autovacuum runs on this server, unless a table's own setting says otherwise.
            assert space["autovacuum_enabled"] is True
            with psycopg.connect(dsn, autocommit=True) as owner:
                owner.execute("ALTER TABLE public.routers SET (autovacuum_enabled = false)")
            _, status = run_json(capsys, "status", "--dsn", dsn, "--sweep", "router_leases")
            assert space_of(status)["autovacuum_enabled"] is False

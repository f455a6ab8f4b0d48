"""Why a swept table's dead rows wait (reaper.commands.space), decided from what the
statistics views say: each verdict, each kind of holder of the xmin horizon as people read
it, and the fix that frees it. Against the real views: tests/db/commands/test_space.py and
tests/process/commands/test_space_holders.py."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from reaper.commands import space
from reaper.commands.render import print_status
from reaper.commands.status import SweepStatus
from reaper.db import TableSpace, XminHolder
from reaper.metrics import Metrics
from reaper.sqltext.names import TableName
from reaper.vocab import HorizonHolder, SpaceVerdict

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
VACUUMED = NOW - timedelta(minutes=5)
ROUTERS = TableName("public", "routers")


def table(
    dead: int | None = 100_000,
    *,
    threshold: int = 2_050,
    enabled: bool = True,
    last_vacuum: datetime | None = VACUUMED,
) -> TableSpace:
    return TableSpace(dead, threshold, enabled, last_vacuum, 3)


def session(
    pid: int = 4242,
    *,
    since: datetime | None = NOW - timedelta(hours=3),
    age: int = 120,
    user: str = "app",
) -> XminHolder:
    return XminHolder(
        "transaction",
        str(pid),
        age,
        since,
        user,
        "monthly-report",
        "idle in transaction" if since else None,
    )


SLOT = XminHolder("replication_slot", "standby_slot", 500, None, None, None, "inactive")
PREPARED = XminHolder(
    "prepared_transaction", "it's-42", 300, NOW - timedelta(days=2), "billing", None, None
)
STANDBY = XminHolder("standby", "replica-b", 80, None, None, "replica-b", "streaming")


@pytest.mark.parametrize(
    ("t", "holder", "expected"),
    [
        # At or under the threshold: autovacuum leaves the table alone until then.
        (table(2_050), session(), SpaceVerdict.OK),
        (table(None), session(), SpaceVerdict.OK),
        (table(0, threshold=0), None, SpaceVerdict.OK),
        # A vacuum ran after the snapshot began, and left them.
        (table(), session(), SpaceVerdict.HELD),
        (table(enabled=False), session(), SpaceVerdict.HELD),
        # The holder's start is unknown (a slot, a standby, a hidden session) and a vacuum ran.
        (table(), SLOT, SpaceVerdict.HELD),
        (table(), STANDBY, SpaceVerdict.HELD),
        (table(), session(since=None), SpaceVerdict.HELD),
        (table(), PREPARED, SpaceVerdict.HELD),
        # The snapshot began after the last vacuum: no vacuum has tried since.
        (table(), session(since=VACUUMED + timedelta(seconds=1)), SpaceVerdict.AUTOVACUUM_BEHIND),
        (
            table(enabled=False),
            session(since=VACUUMED + timedelta(seconds=1)),
            SpaceVerdict.AUTOVACUUM_OFF,
        ),
        # Never vacuumed: whoever holds the horizon, no vacuum has tried.
        (table(last_vacuum=None), SLOT, SpaceVerdict.AUTOVACUUM_BEHIND),
        (table(last_vacuum=None, enabled=False), session(), SpaceVerdict.AUTOVACUUM_OFF),
        # Nothing holds the horizon.
        (table(), None, SpaceVerdict.AUTOVACUUM_BEHIND),
        (table(enabled=False), None, SpaceVerdict.AUTOVACUUM_OFF),
    ],
)
def test_verdict(t: TableSpace, holder: XminHolder | None, expected: SpaceVerdict) -> None:
    assert space.verdict(t, holder) == expected


@pytest.mark.parametrize(
    ("holder", "says", "fix"),
    [
        (
            session(),
            [
                "the transaction of pid 4242",
                "user app",
                "'monthly-report'",
                "idle in transaction",
                "open for 3h since 2026-06-01T09:00:00+00:00",
                "xmin 120 transactions old",
            ],
            "SELECT pg_terminate_backend(4242)",
        ),
        (
            session(since=None),
            [
                "the transaction of pid 4242",
                "user app",
                "its start and state are hidden from this role",
                "grant it pg_read_all_stats",
            ],
            "SELECT pg_terminate_backend(4242)",
        ),
        (
            PREPARED,
            ['prepared transaction "it\'s-42"', "owner billing", "prepared 2d ago"],
            "ROLLBACK PREPARED 'it''s-42'",
        ),
        (
            SLOT,
            ["replication slot 'standby_slot' (inactive", "xmin 500 transactions old"],
            "pg_drop_replication_slot('standby_slot')",
        ),
        (STANDBY, ["the hot_standby_feedback of standby 'replica-b'"], "hot_standby_feedback off"),
    ],
)
def test_each_holder_is_named_with_its_fix(holder: XminHolder, says: list[str], fix: str) -> None:
    found = space.Space(ROUTERS, 100_000, 2_050, True, VACUUMED, holder, SpaceVerdict.HELD)
    line = found.describe(NOW)
    assert line.startswith(
        "100,000 dead rows (autovacuum vacuums past 2,050): "
        "the last vacuum (5m ago) could not remove them"
    )
    for phrase in says:
        assert phrase in line
    assert fix in (found.fix() or "")


def test_autovacuum_off_and_behind_say_so_and_name_the_holder_all_the_same() -> None:
    off = space.Space(ROUTERS, 100_000, 2_050, False, None, SLOT, SpaceVerdict.AUTOVACUUM_OFF)
    assert "autovacuum is off for this table, no vacuum yet" in off.describe(NOW)
    assert "replication slot 'standby_slot'" in off.describe(NOW)
    assert "ALTER TABLE public.routers RESET (autovacuum_enabled)" in (off.fix() or "")
    behind = space.Space(
        ROUTERS, 100_000, 2_050, True, VACUUMED, None, SpaceVerdict.AUTOVACUUM_BEHIND
    )
    assert "autovacuum has not vacuumed it since" in behind.describe(NOW)
    assert "autovacuum_max_workers" in (behind.fix() or "")
    ok = space.Space(ROUTERS, 10, 2_050, True, VACUUMED, None, SpaceVerdict.OK)
    assert ok.fix() is None


class _Rows:
    def __init__(self, rows: list[XminHolder]) -> None:
        self.rows = rows

    def fetch(self, *_: Any, **__: Any) -> list[XminHolder]:
        return self.rows


def test_the_oldest_holder_comes_first_and_a_cause_before_its_echo() -> None:
    # A standby sees the primary's open transactions as running: its feedback, and the slot
    # that keeps it, stop at the same xmin as the transaction that causes them.
    tied = [
        XminHolder("standby", "b", 300, None, None, "b", None),
        XminHolder("replication_slot", "s", 300, None, None, None, "active"),
        XminHolder("transaction", "7", 300, NOW, "app", "", "active"),
        XminHolder("prepared_transaction", "g", 12, NOW, "app", None, None),
    ]
    ordered = space.holders(_Rows(tied))  # type: ignore[arg-type]
    assert [h.kind for h in ordered] == [
        "transaction",
        "replication_slot",
        "standby",
        "prepared_transaction",
    ]
    assert space.holders(_Rows([])) == []  # type: ignore[arg-type]


def _status(found: space.Space | None, error: str | None = None) -> SweepStatus:
    return SweepStatus(
        "router_leases",
        ROUTERS,
        "expired",
        backlog_rows=0,
        estimated_rows=200,
        total_bytes=8192,
        dead_tuples=100_000,
        space=found,
        space_error=error,
        now=NOW,
    )


def test_status_prints_one_line_per_table_whose_rows_wait(monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    held = space.Space(ROUTERS, 100_000, 2_050, True, VACUUMED, session(), SpaceVerdict.HELD)
    # Two sweeps of one table: one line.
    print_status([_status(held), dataclasses.replace(_status(held), sweep="router_leases_2")])
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("space: ")]
    assert len(lines) == 1
    assert "pid 4242" in lines[0] and "Fix: end that transaction" in lines[0]

    ok = space.Space(ROUTERS, 10, 2_050, True, VACUUMED, session(), SpaceVerdict.OK)
    print_status([_status(ok)])
    assert "space:" not in capsys.readouterr().out

    print_status([_status(None, "permission denied for view pg_stat_activity")])
    assert "routers: dead rows not examined: permission denied" in capsys.readouterr().out


def test_horizon_gauges_go_to_zero_and_hide_an_unknown_age() -> None:
    registry = CollectorRegistry()
    metrics = Metrics([], registry)
    metrics.set_horizon(
        {HorizonHolder.TRANSACTION: (120, 10_800.0), HorizonHolder.REPLICATION_SLOT: (500, None)}
    )

    def value(name: str, holder: str) -> float | None:
        return registry.get_sample_value(name, {"holder": holder})

    assert value("reaper_xmin_horizon_age_transactions", "transaction") == 120
    assert value("reaper_xmin_horizon_age_transactions", "replication_slot") == 500
    assert value("reaper_xmin_horizon_age_transactions", "standby") == 0
    assert value("reaper_xmin_horizon_age_seconds", "transaction") == 10_800
    assert value("reaper_xmin_horizon_age_seconds", "prepared_transaction") == 0
    # The same session, seen by a role that may not read its start: no age rather than 0.
    metrics.set_horizon({HorizonHolder.TRANSACTION: (130, None)})
    assert value("reaper_xmin_horizon_age_seconds", "transaction") is None
    assert value("reaper_xmin_horizon_age_transactions", "replication_slot") == 0
    metrics.set_table_space("routers", 100_000, 2_050, None)
    assert registry.get_sample_value("reaper_dead_rows", {"table": "routers"}) == 100_000
    assert (
        registry.get_sample_value("reaper_last_vacuum_timestamp_seconds", {"table": "routers"}) == 0
    )

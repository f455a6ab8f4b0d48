"""Deleted is not freed: whether the space of a swept table's dead rows is being reclaimed,
and what keeps it when it is not (``reaper status``, ``reaper check`` and the daemon's
gauges).

A deleted row stays on disk until a VACUUM removes it, and a VACUUM removes no row that a
transaction deleted after the oldest snapshot still needed began (the xmin horizon): a long
transaction, a prepared transaction, a replication slot or a standby's hot_standby_feedback
holds it back, and every row deleted since waits, "dead but not yet removable". Everything here
comes from the catalog and the statistics views (``ops/table_space.sql``,
``ops/xmin_holders.sql``): no VACUUM, no privilege beyond connecting. Without
``pg_read_all_stats`` PostgreSQL still shows another role's session's pid, user, application and
xmin, but not when its transaction began nor its state: those are then said to be unknown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from reaper import errors, sqltext
from reaper.config.values import format_duration
from reaper.db import Session, TableSpace, XminHolder, regclass_text
from reaper.sqltext.names import TableName, sql_literal
from reaper.vocab import HorizonHolder, SpaceVerdict

# Among holders as old as each other, the cause first: a standby's feedback and a slot's xmin
# repeat the primary's own open transactions, which the standby sees as running.
_KIND_ORDER = tuple(HorizonHolder)


@dataclass(frozen=True)
class Space:
    """Whether one table's dead rows are being reclaimed.

    Attributes:
        table: the table.
        dead_rows: ``n_dead_tup`` over its leaves (None: no statistics yet).
        autovacuum_threshold: the dead rows past which autovacuum vacuums it.
        autovacuum_enabled: whether autovacuum may run on it.
        last_vacuum: the latest VACUUM or autovacuum of it (None: never).
        holder: the oldest holder of the database's xmin horizon (None: none but reaper).
        verdict: see :class:`reaper.vocab.SpaceVerdict` and :func:`verdict`.
    """

    table: TableName
    dead_rows: int | None
    autovacuum_threshold: int
    autovacuum_enabled: bool
    last_vacuum: datetime | None
    holder: XminHolder | None
    verdict: SpaceVerdict

    def describe(self, now: datetime) -> str:
        """One line: the dead rows, the threshold, and why they wait (``now``: the database
        clock, for ages). It does not name the table: the line that shows it does, once."""
        dead = f"{self.dead_rows:,}" if self.dead_rows is not None else "unknown"
        head = f"{dead} dead rows (autovacuum vacuums past {self.autovacuum_threshold:,})"
        holder = describe_holder(self.holder, now) if self.holder else None
        vacuumed = (
            f"the last vacuum ({_ago(self.last_vacuum, now)} ago)"
            if self.last_vacuum
            else "no vacuum yet"
        )
        match self.verdict:
            case SpaceVerdict.OK:
                return f"{head}: reclaimed as they come"
            case SpaceVerdict.HELD:
                return (
                    f"{head}: {vacuumed} could not remove them: no row deleted after the "
                    f"oldest snapshot began can go while it is held, by {holder}"
                )
            case SpaceVerdict.AUTOVACUUM_OFF:
                tail = f"; the oldest snapshot is held by {holder}" if holder else ""
                return f"{head}: autovacuum is off for this table, {vacuumed}{tail}"
            case _:
                tail = f"; the oldest snapshot is held by {holder}" if holder else ""
                return (
                    f"{head}: autovacuum has not vacuumed it since they passed the "
                    f"threshold ({vacuumed}){tail}"
                )

    def fix(self) -> str | None:
        """What frees the space, when something must be done (None otherwise)."""
        if self.verdict == SpaceVerdict.HELD and self.holder is not None:
            return holder_fix(self.holder)
        if self.verdict == SpaceVerdict.AUTOVACUUM_OFF:
            return (
                f"turn autovacuum on (autovacuum and track_counts = on; ALTER TABLE "
                f"{self.table.sql_text} RESET (autovacuum_enabled)), or VACUUM it on a "
                "schedule"
            )
        if self.verdict == SpaceVerdict.AUTOVACUUM_BEHIND:
            return (
                "let autovacuum keep up: more autovacuum_max_workers, a lower "
                "autovacuum_vacuum_cost_delay, or a lower autovacuum_vacuum_scale_factor "
                "for the table"
            )
        return None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO 8601."""
        h = self.holder
        return {
            "table": self.table,
            "dead_rows": self.dead_rows,
            "autovacuum_threshold": self.autovacuum_threshold,
            "autovacuum_enabled": self.autovacuum_enabled,
            "last_vacuum": self.last_vacuum.isoformat() if self.last_vacuum else None,
            "verdict": self.verdict,
            "horizon_holder": None
            if h is None
            else {
                "kind": h.kind,
                "name": h.name,
                "xmin_age_transactions": h.xmin_age,
                "since": h.since.isoformat() if h.since else None,
                "user": h.user_name,
                "application_name": h.application_name,
                "state": h.state,
            },
        }


def holders(session: Session) -> list[XminHolder]:
    """The oldest holder of each kind of the database's xmin horizon, oldest first (this
    session left out).

    Raises:
        DatabaseError: the statistics views could not be read.
    """
    rows = session.fetch(XminHolder, sqltext.ops("xmin_holders"))
    return sorted(rows, key=lambda h: (-h.xmin_age, _KIND_ORDER.index(HorizonHolder(h.kind))))


def table_space(session: Session, table: TableName, held_by: Sequence[XminHolder]) -> Space:
    """The space of ``table``'s dead rows, ``held_by`` being :func:`holders`' answer.

    Raises:
        ObjectMissing: the table does not exist.
        DatabaseError: the catalog could not be read.
    """
    rows = session.fetch(TableSpace, sqltext.ops("table_space"), {"table": regclass_text(table)})
    if not rows:
        raise errors.ObjectMissing(f'{table}: relation "{table}" does not exist')
    t = rows[0]
    oldest = held_by[0] if held_by else None
    return Space(
        table,
        t.dead_rows,
        t.autovacuum_threshold,
        t.autovacuum_enabled,
        t.last_vacuum,
        oldest,
        verdict(t, oldest),
    )


def verdict(t: TableSpace, holder: XminHolder | None) -> SpaceVerdict:
    """Why ``t``'s dead rows wait, if they do.

    At most the autovacuum threshold: ``ok`` (autovacuum leaves a table alone until then).
    Past it, when a vacuum has run since the oldest snapshot began (or that snapshot's start
    is unknown: a slot's, a standby's, another role's session without pg_read_all_stats),
    ``held``: that vacuum could remove nothing deleted after the snapshot began. Otherwise
    ``autovacuum_off`` when autovacuum may not run on the table, else ``autovacuum_behind``.
    """
    if (t.dead_rows or 0) <= t.autovacuum_threshold:
        return SpaceVerdict.OK
    if (
        holder is not None
        and t.last_vacuum is not None
        and (holder.since is None or holder.since <= t.last_vacuum)
    ):
        return SpaceVerdict.HELD
    if not t.autovacuum_enabled:
        return SpaceVerdict.AUTOVACUUM_OFF
    return SpaceVerdict.AUTOVACUUM_BEHIND


def _ago(then: datetime, now: datetime) -> str:
    seconds = max((now - then).total_seconds(), 0.0)
    # An age of days shown to the second is noise: whole minutes past an hour.
    step = 60 if seconds >= 3600 else 1
    return format_duration(timedelta(seconds=round(seconds / step) * step))


def describe_holder(h: XminHolder, now: datetime) -> str:
    """One phrase naming a horizon holder: what it is, since when (where known), and how many
    transactions old its xmin is."""
    xmin = f"xmin {h.xmin_age:,} transactions old"
    match HorizonHolder(h.kind):
        case HorizonHolder.TRANSACTION:
            who = f"user {h.user_name or '?'}, application {h.application_name or ''!r}"
            if h.since is None:
                return (
                    f"the transaction of pid {h.name} ({who}; {xmin}; its start and state "
                    "are hidden from this role: grant it pg_read_all_stats to see them)"
                )
            return (
                f"the transaction of pid {h.name} ({who}, {h.state or 'state unknown'}, "
                f"open for {_ago(h.since, now)} since {h.since.isoformat(timespec='seconds')}"
                f"; {xmin})"
            )
        case HorizonHolder.PREPARED_TRANSACTION:
            since = f", prepared {_ago(h.since, now)} ago" if h.since else ""
            return f"prepared transaction {h.name!r} (owner {h.user_name or '?'}{since}; {xmin})"
        case HorizonHolder.REPLICATION_SLOT:
            return f"replication slot {h.name!r} ({h.state}; {xmin})"
        case _:
            return f"the hot_standby_feedback of standby {h.name!r} ({xmin})"


def holder_fix(h: XminHolder) -> str:
    """What releases the horizon ``h`` holds."""
    match HorizonHolder(h.kind):
        case HorizonHolder.TRANSACTION:
            return (
                f"end that transaction (its application commits or rolls back), or "
                f"SELECT pg_terminate_backend({h.name}); set idle_in_transaction_session_"
                "timeout to bound such sessions"
            )
        case HorizonHolder.PREPARED_TRANSACTION:
            return (
                f"COMMIT PREPARED {sql_literal(h.name)} or ROLLBACK PREPARED "
                f"{sql_literal(h.name)}, as its transaction manager decides"
            )
        case HorizonHolder.REPLICATION_SLOT:
            return (
                f"if no standby uses the slot any more, SELECT pg_drop_replication_slot"
                f"({sql_literal(h.name)}); else end the long queries on its standby"
            )
        case _:
            return (
                f"end the long queries on standby {h.name!r}, or turn its "
                "hot_standby_feedback off (its queries may then be cancelled)"
            )

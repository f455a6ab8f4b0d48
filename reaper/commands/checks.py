"""``reaper check``: what must hold around the sweeps for their deletes to stay cheap and
allowed, checked against the live database with a role that needs no superuser.

The failures that hurt cleaners most are in their surroundings: an index a migration dropped
or that an interrupted ``CREATE INDEX CONCURRENTLY`` left INVALID (the planner never uses
it, and a 2 ms batch becomes a full scan), a foreign key without an index on its referencing
column, a role that cannot delete. Every check here is derived from the sweep's declaration
(its table, predicate and ``indexes``), the catalog and EXPLAIN, so sweeps declared in a
config file are checked exactly like the built-in ones.

Every check needs only what the sweeps need (SELECT and DELETE) and what
any role may read (``pg_index``, ``pg_constraint``, ``pg_locks``, ``has_table_privilege``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from reaper import errors, sqltext
from reaper.commands import cascades, overlaps, space
from reaper.config.settings import Settings
from reaper.config.sweeps import Sweep
from reaper.db import (
    MIN_HEAP_WALK_VERSION,
    BrokenIndex,
    Database,
    ForeignKey,
    IndexState,
    Session,
    SweepStatements,
    TableColumn,
    TableLeaf,
    TableOwner,
    WhoAmI,
    XminHolder,
    regclass_text,
)
from reaper.engine import pacing, partitions
from reaper.engine.clock import compute_cutoffs
from reaper.engine.execute import keep
from reaper.metrics import ALL_SWEEPS, Metrics
from reaper.sqltext import sqlinfo
from reaper.sqltext.names import TableName, sql_literal, sql_name
from reaper.vocab import CheckName, CheckStatus, ObstacleKind, SpaceVerdict

log = structlog.get_logger("reaper.checks")

PASS, WARN, FAIL = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL
# The oldest release reaper supports (the SQL it ships needs nothing newer; upstream ended
# 13's support in November 2025); the heap walk needs TID range scans (14).
MIN_SERVER_VERSION = 130000

_SCAN_NODES = ("Index Scan", "Index Only Scan", "Bitmap Index Scan")


@dataclass(frozen=True)
class Finding:
    """One result of one check.

    Attributes:
        sweep: the sweep it concerns, or ``*`` for the server and connection checks.
        check: what was checked (``index``, ``plan`` ... : see :class:`reaper.vocab.CheckName`).
        status: ``pass``, ``warn`` (worth knowing, not a failure) or ``fail``.
        subject: the object checked (a table, an index, a constraint, a privilege).
        detail: what was found, in one line.
        fix: the command that repairs a failure, when there is one.
    """

    sweep: str
    check: CheckName
    status: CheckStatus
    subject: str
    detail: str
    fix: str | None = None

    @property
    def failed(self) -> bool:
        """True for a failure (a warning is not one)."""
        return self.status == FAIL

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "sweep": self.sweep,
            "check": self.check,
            "status": self.status,
            "subject": self.subject,
            "detail": self.detail,
            "fix": self.fix,
        }


def run_checks(
    db: Database,
    sweeps: Sequence[Sweep],
    settings: Settings,
    *,
    now: datetime | None = None,
) -> list[Finding]:
    """Run every check for ``sweeps`` (the enabled ones) and return one finding per result.

    A database error inside one check becomes that check's failure; the others still run.

    Args:
        db: the database, reached as the sweeps reach it (same role, same pool).
        sweeps: the sweeps to check, each on its own.
        settings: retentions (the cutoffs EXPLAIN plans with), batch size, strategy,
            ``seq_scan_max_rows``.
        now: pin the clock (tests); None uses the database's now().

    Raises:
        ConnectionFailed: the database cannot be reached at all.
    """
    findings: list[Finding] = []
    with db.session(read_only=True) as session:
        findings += _server_checks(session)
        findings.append(_advisory_lock_check(db))
        findings.append(_pacing_check(session, settings))
        held_by: list[XminHolder] | errors.DatabaseError
        try:
            held_by = space.holders(session)
        except errors.DatabaseError as exc:
            held_by = exc
        for sweep in sweeps:
            findings += _sweep_checks(session, sweep, settings, now, held_by)
    findings += _overlaps(sweeps)
    return findings


def _overlaps(sweeps: Sequence[Sweep]) -> list[Finding]:
    """Sweeps of one table that can match one row with different retentions
    (:mod:`.overlaps`): a failure when the shorter is as broad as the longer (the longer's
    retention holds for none of their shared rows), a warning when it narrows it (a
    deliberate exception); a pass for each declared sweep that shares its table with no such
    one (built-in sweeps share theirs by design, and say nothing)."""
    out: list[Finding] = []
    flagged: set[str] = set()
    for o in overlaps.overlaps(sweeps):
        flagged |= {o.shorter.name, o.longer.name}
        out.append(
            Finding(
                o.shorter.name,
                CheckName.OVERLAP,
                WARN if o.exception else FAIL,
                f"{o.shorter.name} and {o.longer.name}",
                o.detail(),
                o.fix(),
            )
        )
    declared = {s.table for s in sweeps if not s.builtin}
    shared = {s.table for s in sweeps if sum(t.table == s.table for t in sweeps) > 1}
    for s in sweeps:
        if s.table in shared & declared and s.name not in flagged:
            out.append(
                Finding(
                    s.name,
                    CheckName.OVERLAP,
                    PASS,
                    s.table,
                    "no other sweep of the table with another retention can match its rows",
                )
            )
    return out


def failures(findings: Sequence[Finding]) -> list[Finding]:
    """The findings that failed."""
    return [f for f in findings if f.failed]


def report(findings: Sequence[Finding], metrics: Metrics | None = None) -> None:
    """Log each finding that is not a pass (one ``check_failed`` / ``check_warning`` line
    each, one ``checks_finished`` summary) and export ``reaper_check_failures``."""
    for f in findings:
        if f.status == FAIL:
            log.error("check_failed", **f.as_dict())
        elif f.status == WARN:
            log.warning("check_warning", **f.as_dict())
    log.info(
        "checks_finished",
        checks=len(findings),
        failed=len(failures(findings)),
        warnings=sum(f.status == WARN for f in findings),
    )
    if metrics is not None:
        metrics.set_check_failures((f.sweep, f.check) for f in findings if f.failed)


# -- the server and the connection ----------------------------------------------------------


def _server_checks(session: Session) -> list[Finding]:
    out: list[Finding] = []
    who = session.fetch(WhoAmI, sqltext.ops("whoami"))[0]
    version = who.server_version
    shown = f"{version // 10000}.{version % 10000}"
    if version < MIN_SERVER_VERSION:
        out.append(
            Finding(
                ALL_SWEEPS,
                CheckName.SERVER_VERSION,
                FAIL,
                f"PostgreSQL {shown}",
                "reaper needs PostgreSQL 13 or later",
                "upgrade the server",
            )
        )
    elif version < MIN_HEAP_WALK_VERSION:
        out.append(
            Finding(
                ALL_SWEEPS,
                CheckName.SERVER_VERSION,
                WARN,
                f"PostgreSQL {shown}",
                "supported, but without TID range scans (PostgreSQL 14): every sweep "
                "follows its index, never walks the heap",
            )
        )
    else:
        out.append(
            Finding(
                ALL_SWEEPS,
                CheckName.SERVER_VERSION,
                PASS,
                f"PostgreSQL {shown}",
                "supported (13 or later), heap walk available (14 or later)",
            )
        )
    role = who.role_name
    if who.superuser:
        out.append(
            Finding(
                ALL_SWEEPS,
                CheckName.ROLE,
                FAIL,
                role,
                "connected as a superuser: it bypasses every grant and row-level "
                "security policy, so the privilege checks prove nothing and a mistake has "
                "no limit",
                f"run reaper as the role of {sqltext.where('grants.sql')}",
            )
        )
    else:
        out.append(Finding(ALL_SWEEPS, CheckName.ROLE, PASS, role, "not a superuser"))
        database = who.database
        if who.can_create_temp:
            out.append(
                Finding(
                    ALL_SWEEPS,
                    CheckName.ROLE,
                    WARN,
                    f"TEMPORARY on database {database}",
                    f"role {role} can create temporary tables (PUBLIC holds TEMPORARY on "
                    "the database by default)",
                    f"the database owner: REVOKE TEMPORARY ON DATABASE {sql_name(database)} FROM "
                    "PUBLIC (grant it back to the roles that need it)",
                )
            )
        if who.can_create_in_public:
            out.append(
                Finding(
                    ALL_SWEEPS,
                    CheckName.ROLE,
                    WARN,
                    "CREATE on schema public",
                    f"role {role} can create tables in schema public",
                    "the schema owner: REVOKE CREATE ON SCHEMA public FROM PUBLIC",
                )
            )
    return out


def _pacing_check(session: Session, settings: Settings) -> Finding:
    """The pacer can see what it paces by (``reaper.engine.pacing``): the standbys' positions in
    ``pg_stat_replication`` and other roles' sessions in ``pg_stat_activity`` need
    ``pg_read_all_stats`` (part of ``pg_monitor``). A warning, not a failure: without it the
    sweeps run, unpaced."""
    subject = "pg_stat_replication, pg_stat_activity"
    if settings.max_replica_lag is None and settings.busy_share >= 1.0:
        return Finding(ALL_SWEEPS, CheckName.PACING, PASS, subject, "pacing is off")
    sees_all = bool(session.scalar(sqltext.ops("reads_all_stats")))
    sample = session.pacing_sample(pacing.BUSY_WINDOW_SECONDS)
    standbys = ", ".join(s.name for s in sample.standbys) or "none"
    if not sees_all:
        role = str(session.scalar(sqltext.ops("current_role")))
        return Finding(
            ALL_SWEEPS,
            CheckName.PACING,
            WARN,
            subject,
            f"role {role} cannot read the standbys' replay positions (standbys: {standbys}) "
            "nor other roles' sessions: batches will not pause for replica lag or live traffic",
            f"GRANT pg_read_all_stats TO {sql_name(role)}",
        )
    return Finding(
        ALL_SWEEPS,
        CheckName.PACING,
        PASS,
        subject,
        f"standbys and sessions visible (standbys: {standbys})",
    )


def _advisory_lock_check(db: Database) -> Finding:
    """The sweeps' advisory locks hold on this connection string
    (:meth:`reaper.db.Database.check_advisory_locks`, the probe ``run`` and ``run-once`` make
    at startup): not through a transaction-pooling proxy."""
    subject = "pg_try_advisory_lock"
    try:
        db.check_advisory_locks()
    except errors.LockNotHeld as exc:
        return Finding(
            ALL_SWEEPS,
            CheckName.ADVISORY_LOCK,
            FAIL,
            subject,
            str(exc),
            "connect reaper to PostgreSQL directly, or through a pool in session "
            "mode with --session-pooler",
        )
    except errors.DatabaseError as exc:
        return Finding(ALL_SWEEPS, CheckName.ADVISORY_LOCK, FAIL, subject, str(exc))
    return Finding(
        ALL_SWEEPS,
        CheckName.ADVISORY_LOCK,
        PASS,
        subject,
        "held across transactions on one server session, exclusive to it",
    )


# -- each sweep -------------------------------------------------------------------------------


def _sweep_checks(
    session: Session,
    sweep: Sweep,
    settings: Settings,
    now: datetime | None,
    held_by: list[XminHolder] | errors.DatabaseError,
) -> list[Finding]:
    def finding(
        check: CheckName, status: CheckStatus, subject: str, detail: str, fix: str | None = None
    ) -> Finding:
        return Finding(sweep.name, check, status, subject, detail, fix)

    out: list[Finding] = []

    def guarded(check: CheckName, subject: str, fn: Callable[[], Iterator[Finding]]) -> None:
        try:
            out.extend(fn())
        except (errors.DatabaseError, errors.ConfigError) as exc:
            out.append(finding(check, FAIL, subject, str(exc)))

    if not session.scalar(sqltext.ops("table_exists"), {"table": regclass_text(sweep.table)}):
        out.append(
            finding(
                CheckName.TABLE,
                FAIL,
                sweep.table,
                "the table does not exist",
                "check the sweep's table name, or disable the sweep",
            )
        )
        return out
    out.append(finding(CheckName.TABLE, PASS, sweep.table, "exists"))
    try:
        stmts = session.statements(sweep.predicate)
        leaves = session.fetch(
            TableLeaf, sqltext.ops("table_leaves"), {"table": regclass_text(sweep.table)}
        )
    except (errors.DatabaseError, errors.RelationRefused) as exc:
        out.append(finding(CheckName.TABLE, FAIL, sweep.table, str(exc)))
        return out
    relnames = {r.relname for r in leaves}
    guarded(CheckName.COLUMNS, sweep.table, lambda: _columns(session, sweep, finding))
    guarded(
        CheckName.TIME_ZONE, sweep.table, lambda: _wall_times(session, sweep, settings, finding)
    )
    if sweep.archive is not None or sweep.key:
        guarded(
            CheckName.COLUMNS, sweep.archive or sweep.table, lambda: _trail(session, sweep, finding)
        )
    guarded(
        CheckName.PRIVILEGES,
        sweep.table,
        lambda: _privileges(session, stmts, finding, sweep.archive),
    )
    guarded(CheckName.DELETES, sweep.table, lambda: _deletes(session, stmts, finding))

    plan: dict[str, Any] | None = None
    params: dict[str, Any] = {}
    batch: dict[str, Any] = {}
    try:
        params = dict(compute_cutoffs(session, sweep, now))
        batch = dict(params, batch_size=sweep.batch_size)
        # Planned as it runs: sequential scans off (index_batch_settings.sql), so a Seq Scan
        # left in the plan is one that no index can replace.
        plan = session.explain(stmts.index_plan, batch, index_batch=True, context=sweep.table)
    except errors.ObjectMissing as exc:
        out.append(
            finding(
                CheckName.COLUMNS,
                FAIL,
                sweep.table,
                f"the batch does not plan: {exc}",
                "fix the predicate or the schema",
            )
        )
    except (errors.DatabaseError, errors.ConfigError) as exc:
        out.append(finding(CheckName.PLAN, FAIL, sweep.table, f"the batch does not plan: {exc}"))

    used = _indexes_used(plan, relnames) if plan is not None else []
    guarded(CheckName.INDEX, sweep.table, lambda: _indexes(session, sweep, stmts, used, finding))
    guarded(
        CheckName.FOREIGN_KEY_INDEX, sweep.table, lambda: _foreign_keys(session, sweep, finding)
    )
    guarded(CheckName.CASCADES, sweep.table, lambda: _cascades(session, sweep, finding))
    if plan is not None:
        guarded(
            CheckName.PLAN, sweep.table, lambda: _plan(sweep, settings, plan, used, leaves, finding)
        )
    if params:
        guarded(
            CheckName.PARTITIONS,
            sweep.table,
            lambda: (
                finding(CheckName.PARTITIONS, *f) for f in partitions.check(session, sweep, params)
            ),
        )
    out.extend(_space(session, sweep, held_by, finding))
    return out


def _space(
    session: Session,
    sweep: Sweep,
    held_by: list[XminHolder] | errors.DatabaseError,
    finding: _FindingFn,
) -> Iterator[Finding]:
    """Whether the space of the rows the sweep deletes is reclaimed (:mod:`.space`): a
    warning, never a failure, naming what holds the dead rows and how to free them."""
    try:
        if isinstance(held_by, errors.DatabaseError):
            raise held_by
        found = space.table_space(session, sweep.table, held_by)
        text = found.describe(session.now())
    except errors.DatabaseError as exc:
        yield finding(CheckName.SPACE, WARN, sweep.table, f"dead rows not examined: {exc}")
        return
    if found.verdict == SpaceVerdict.OK:
        yield finding(CheckName.SPACE, PASS, sweep.table, text)
    else:
        yield finding(CheckName.SPACE, WARN, sweep.table, text, found.fix())


_FindingFn = Callable[..., Finding]


def _columns(session: Session, sweep: Sweep, finding: _FindingFn) -> Iterator[Finding]:
    have = {
        r.column_name
        for r in session.fetch(
            TableColumn, sqltext.ops("table_columns"), {"table": regclass_text(sweep.table)}
        )
    }
    used = sweep.predicate.columns
    missing = [c for c in used if c not in have]
    if missing:
        yield finding(
            CheckName.COLUMNS,
            FAIL,
            sweep.table,
            f"the predicate uses column(s) the table lacks: {', '.join(missing)}",
            "fix the predicate or the schema (a migration renamed or dropped them?)",
        )
    else:
        yield finding(
            CheckName.COLUMNS,
            PASS,
            sweep.table,
            f"every column the predicate uses exists: {', '.join(used)}",
        )


# Column types without a time zone: PostgreSQL reads them in the session's TimeZone (which
# reaper pins to timestamp_time_zone) when it compares them with a cutoff.
_WALL_TIME_TYPES = {"timestamp": "timestamp without time zone", "date": "date"}


def _wall_times(
    session: Session, sweep: Sweep, settings: Settings, finding: _FindingFn
) -> Iterator[Finding]:
    """Warn about each column without time zone that the predicate compares with a cutoff:
    its values are wall times, and only timestamp_time_zone says in which zone."""
    types = {
        r.column_name: r.base_type
        for r in session.fetch(
            TableColumn, sqltext.ops("table_columns"), {"table": regclass_text(sweep.table)}
        )
    }
    compared = sweep.predicate.age_columns
    zone = settings.timestamp_time_zone
    relname = sweep.table.split(".")[-1]
    for column in compared:
        kind = _WALL_TIME_TYPES.get(str(types.get(column)))
        if kind is None:
            continue
        yield finding(
            CheckName.TIME_ZONE,
            WARN,
            f"{relname}.{column}",
            f"column {column} of {sweep.table} is {kind}: reaper reads its values as wall "
            f"times in {zone} (timestamp_time_zone) when it compares them with a cutoff; if "
            "the application writes another zone's wall times, rows are kept or deleted "
            "that many hours off",
            f"set timestamp_time_zone to the zone the application writes {column} in, or "
            f"ALTER TABLE {sweep.table.sql_text} ALTER {sql_name(column)} TYPE timestamptz "
            f"USING {sql_name(column)} AT TIME ZONE {sql_literal(zone)}",
        )


def _trail(session: Session, sweep: Sweep, finding: _FindingFn) -> Iterator[Finding]:
    """The sweep's key columns exist, and its archive table takes every column of its rows
    (:meth:`reaper.db.Session.trail` refuses otherwise, as a run would)."""
    trail = session.trail(sweep.table, keep(sweep))
    if sweep.key:
        yield finding(
            CheckName.COLUMNS, PASS, sweep.table, f"every key column exists: {', '.join(sweep.key)}"
        )
    if trail.archive is not None:
        yield finding(
            CheckName.COLUMNS,
            PASS,
            trail.archive,
            f"archive table {trail.archive} takes every column of {sweep.table}",
        )


def _privileges(
    session: Session, stmts: SweepStatements, finding: _FindingFn, archive: TableName | None
) -> Iterator[Finding]:
    needed = stmts.required_privileges()
    if archive is not None and (archive, "INSERT") not in needed:
        needed.append((archive, "INSERT"))
    missing = session.missing_privileges(needed)
    role = session.scalar(sqltext.ops("current_role"))
    for table, privilege in missing:
        why = {
            "SELECT": "to find the garbage",
            "DELETE": "to delete it",
            "INSERT": "to archive the rows it deletes",
        }[privilege]
        yield finding(
            CheckName.PRIVILEGES,
            FAIL,
            f"{privilege} on {table}",
            f"role {role} lacks {privilege} on table {table} ({why})",
            f"GRANT {privilege} ON {table.sql_text} TO {sql_name(role)}",
        )
    if not missing:
        # The subject is the table: its own privileges bare, another table's named.
        held = ", ".join(p if t == stmts.table else f"{p} on {t}" for t, p in needed)
        yield finding(CheckName.PRIVILEGES, PASS, stmts.table, f"role {role} holds {held}")
    owner = session.fetch(
        TableOwner, sqltext.ops("table_owner"), {"table": regclass_text(stmts.table)}
    )
    superuser = session.fetch(WhoAmI, sqltext.ops("whoami"))[0].superuser
    if owner and owner[0].acts_as_owner and not superuser:
        yield finding(
            CheckName.PRIVILEGES,
            WARN,
            stmts.table,
            f"role {role} owns table {stmts.table} (or is a member of its owner "
            f"{owner[0].owner}): it may alter, truncate or drop it, whatever the "
            "grants say",
            f"connect as the role of {sqltext.where('grants.sql')}",
        )


# Row-level security that lets the role read fewer than this fraction of a heap's rows (by
# the catalog's estimate) hides rows from the sweep: a failure. A stale estimate errs by less.
MIN_VISIBLE_FRACTION = 0.5


def _deletes(session: Session, stmts: SweepStatements, finding: _FindingFn) -> Iterator[Finding]:
    """What can keep a batch's DELETE from removing the rows it names, per heap, as the
    catalog tells it (the causes a run that stops for lack of progress names:
    ``engine/delete_obstacles.sql``), and row-level security that hides rows from the role
    (a count of a block sample under the role, against ``pg_class.reltuples``)."""
    role = session.scalar(sqltext.ops("current_role"))
    bypass = (
        f"ALTER ROLE {sql_name(role)} BYPASSRLS, or a policy for {role} that lets it read and "
        "delete every row the sweep may delete"
    )
    clean = True
    for hs in stmts.heaps:
        heap = hs.heap.table
        obstacles = session.delete_obstacles(hs)
        for o in obstacles:
            clean = False
            if o.kind == ObstacleKind.TRIGGER:
                # Whether a trigger ever returns NULL cannot be read from the catalog.
                yield finding(
                    CheckName.DELETES,
                    WARN,
                    f"trigger {o.name} on {heap}",
                    f"{o.detail}: where it returns NULL (a soft delete) the row stays, and a "
                    "run whose batch removes none of its rows stops as a failure",
                    "let the trigger return OLD for the rows reaper deletes, or do not sweep "
                    "this table",
                )
            elif o.kind == ObstacleKind.RULE:
                yield finding(
                    CheckName.DELETES,
                    FAIL,
                    f"rule {o.name} on {heap}",
                    f"{o.detail}: it rewrites every batch's DELETE",
                    "drop the rule ON DELETE",
                )
            else:
                yield finding(
                    CheckName.DELETES,
                    FAIL,
                    f"row-level security on {heap}",
                    f"{o.detail}: batches select rows their DELETE cannot reach, remove "
                    "none of them, and the run stops as a failure",
                    bypass,
                )
        seen, visible = session.visible_rows(hs)
        if not seen.filtered:
            continue
        clean = False
        if seen.estimated_rows < 0:
            yield finding(
                CheckName.DELETES,
                WARN,
                f"row-level security on {heap}",
                f"row-level security filters what role {role} reads of {heap}, which was never "
                "analyzed: whether it hides rows from the sweep cannot be known",
                f"ANALYZE {heap.sql_text}",
            )
        elif visible is not None and visible < seen.estimated_rows * MIN_VISIBLE_FRACTION:
            yield finding(
                CheckName.DELETES,
                FAIL,
                f"row-level security on {heap}",
                f"row-level security hides rows of {heap} from role {role}: it reads about "
                f"{visible:,} of about {seen.estimated_rows:,} rows (pg_class.reltuples); the "
                "rows it cannot read are never deleted, and the backlog gauges do not count "
                f"them (if {heap} shrank since it was last analyzed: ANALYZE {heap})",
                bypass,
            )
        elif not obstacles:
            shown = "" if visible is None else f" (about {visible:,} of {seen.estimated_rows:,})"
            yield finding(
                CheckName.DELETES,
                PASS,
                f"row-level security on {heap}",
                f"role {role} reads the rows of {heap}{shown}",
            )
    if clean:
        yield finding(
            CheckName.DELETES,
            PASS,
            stmts.table,
            "no BEFORE DELETE row trigger, rule ON DELETE or row-level security "
            "keeps a batch's DELETE from removing the rows it names",
        )


def _shipped(name: str) -> sqlinfo.IndexSpec | None:
    bare = name.split(".")[-1]
    return next((i for i in sqlinfo.shipped_indexes() if i.name == bare), None)


def missing_indexes(session: Session, sweeps: Sequence[Sweep]) -> list[tuple[str, str, str]]:
    """``(sweep, index, what is wrong)`` for each index that a sweep declares and that is
    absent or not valid: the cheap part of the ``index`` check (one catalog query on
    ``session``), which ``run-once`` makes before sweeping so that a run never scans in
    silence."""
    names = sorted({name for s in sweeps for name in s.indexes})
    if not names:
        return []
    # An index lives in its table's schema: looked up among the indexes of the sweeps' tables.
    tables = sorted({regclass_text(t) for s in sweeps for t in s.predicate.tables_read})
    states = {
        r.name: r
        for r in session.fetch(
            IndexState, sqltext.ops("index_state"), {"names": names, "tables": tables}
        )
    }
    out = []
    for sweep in sweeps:
        for name in sweep.indexes:
            row = states.get(name)
            if row is None or not row.present:
                out.append((sweep.name, name, "does not exist"))
            elif not row.valid or not row.ready:
                out.append((sweep.name, row.index_name or name, "is INVALID"))
    return out


def index_statements(sweep: Sweep) -> str:
    """What builds an index that serves ``sweep``'s batches: ``reaper indexes ensure`` for a
    built-in sweep; for a declared one, a ``CREATE INDEX CONCURRENTLY`` on each column its
    predicate compares with a cutoff (``reaper indexes ensure`` builds only the shipped
    indexes, none of which is on a declared sweep's table)."""
    predicate = sweep.predicate
    if sweep.builtin or not predicate.age_columns:
        return "reaper indexes ensure"
    return "; ".join(
        f"CREATE INDEX CONCURRENTLY ON {predicate.table.sql_text} ({sql_name(column)})"
        for column in predicate.age_columns
    )


def _repair(name: str) -> str:
    if _shipped(name) is not None:
        return "reaper indexes ensure"
    return (
        f"REINDEX INDEX CONCURRENTLY {name}  (or DROP INDEX CONCURRENTLY {name}; "
        "then create it again)"
    )


def _indexes(
    session: Session,
    sweep: Sweep,
    stmts: SweepStatements,
    used: list[str],
    finding: _FindingFn,
) -> Iterator[Finding]:
    names = list(sweep.indexes) or used
    reported: set[str] = set()
    tables = [regclass_text(t) for t in stmts.tables_read]
    states = (
        session.fetch(IndexState, sqltext.ops("index_state"), {"names": names, "tables": tables})
        if names
        else []
    )
    for row in states:
        name = row.name
        if not row.present or row.index_name is None:
            spec = _shipped(name)
            yield finding(
                CheckName.INDEX,
                FAIL,
                name,
                "does not exist: the sweep's batches scan instead",
                "reaper indexes ensure" if spec else f"create index {name}",
            )
            continue
        reported.add(row.index_name)
        if not row.valid or not row.ready:
            yield finding(
                CheckName.INDEX,
                FAIL,
                row.index_name,
                f"INVALID (indisvalid={row.valid}, indisready={row.ready}): left by an "
                "interrupted CREATE INDEX CONCURRENTLY; the planner never uses it",
                _repair(row.index_name),
            )
        else:
            yield finding(
                CheckName.INDEX, PASS, row.index_name, f"valid and ready, on {row.table_name}"
            )
    if not names:
        yield finding(
            CheckName.INDEX,
            WARN,
            sweep.table,
            "the sweep declares no index and its batch plan uses none",
        )
    # An INVALID index on any table the sweep reads: writes still pay for it, the planner
    # never uses it, and it may be the one this sweep should be using.
    tables_read = [regclass_text(t) for t in stmts.tables_read]
    for broken in session.fetch(
        BrokenIndex, sqltext.ops("broken_indexes"), {"tables": tables_read}
    ):
        if broken.index_name in reported:
            continue
        if broken.building:
            yield finding(
                CheckName.INDEX,
                WARN,
                broken.index_name,
                "being built right now by a CREATE INDEX CONCURRENTLY",
            )
            continue
        yield finding(
            CheckName.INDEX,
            FAIL,
            broken.index_name,
            f"INVALID index on {broken.table_name} (indisvalid={broken.valid}, "
            f"indisready={broken.ready}): an interrupted CREATE INDEX CONCURRENTLY; the "
            "planner never uses it",
            _repair(broken.index_name),
        )


def _foreign_keys(session: Session, sweep: Sweep, finding: _FindingFn) -> Iterator[Finding]:
    rows = session.fetch(
        ForeignKey, sqltext.ops("foreign_keys"), {"table": regclass_text(sweep.table)}
    )
    for row in rows:
        cols = ", ".join(row.columns)
        subject = f"{row.referencing_table} ({cols})"
        if row.indexed:
            yield finding(
                CheckName.FOREIGN_KEY_INDEX,
                PASS,
                subject,
                f"{row.constraint_name} references {sweep.table}; an index leads with its columns",
            )
        else:
            yield finding(
                CheckName.FOREIGN_KEY_INDEX,
                FAIL,
                subject,
                f"{row.constraint_name} references {sweep.table} and no valid index leads "
                f"with {cols}: every deleted row makes PostgreSQL scan {row.referencing_table}",
                f"CREATE INDEX CONCURRENTLY ON {row.referencing_table} "
                f"({', '.join(sql_name(c) for c in row.columns)})",
            )
    if not rows:
        yield finding(
            CheckName.FOREIGN_KEY_INDEX, PASS, sweep.table, "no foreign key references the table"
        )


def _cascades(session: Session, sweep: Sweep, finding: _FindingFn) -> Iterator[Finding]:
    """Each ``ON DELETE CASCADE`` foreign key a delete from the sweep's table reaches, at any
    depth, with the rows it takes per deleted row (:mod:`.cascades`): a warning, so that what
    a sweep really deletes is said before it runs. Nothing when none does (most tables: a
    line per sweep would only lengthen the table)."""
    found = cascades.cascades(session, sweep.table)
    for c in found:
        yield finding(
            CheckName.CASCADES,
            WARN,
            f"ON DELETE CASCADE {c.constraint_name}",
            "each row the sweep deletes also deletes " + cascades.describe(c, named=False),
            f"if those rows must stay: make {c.constraint_name} ON DELETE RESTRICT (the sweep "
            "then skips the rows they reference), or sweep them first with a sweep of their "
            "own (after = [...])",
        )


def _walk_plan(
    node: dict[str, Any], relation: str | None = None
) -> Iterator[tuple[str, str | None, str | None]]:
    """``(node type, relation, index)`` of every node; a Bitmap Index Scan inherits its
    Bitmap Heap Scan's relation."""
    relation = node.get("Relation Name", relation)
    yield node["Node Type"], relation, node.get("Index Name")
    for child in node.get("Plans", ()):
        yield from _walk_plan(child, relation)


def _indexes_used(plan: dict[str, Any], relnames: set[str]) -> list[str]:
    """The indexes through which ``plan`` reads the relations ``relnames`` (a table, or a
    partitioned table's leaves), in plan order."""
    out: list[str] = []
    for kind, relation, index in _walk_plan(plan):
        if kind in _SCAN_NODES and relation in relnames and index and index not in out:
            out.append(index)
    return out


def _seq_scans(plan: dict[str, Any], relnames: set[str]) -> set[str]:
    """The relations among ``relnames`` that ``plan`` reads with a Seq Scan."""
    return {r for k, r, _ in _walk_plan(plan) if k == "Seq Scan" and r in relnames}


def _plan(
    sweep: Sweep,
    settings: Settings,
    plan: dict[str, Any],
    used: list[str],
    leaves: list[TableLeaf],
    finding: _FindingFn,
) -> Iterator[Finding]:
    subject = f"{sweep.table} (index batch)"
    relnames = {r.relname for r in leaves}
    limit = settings.seq_scan_max_rows

    def scanned(p: dict[str, Any]) -> tuple[str, int, int]:
        """What ``p`` scans sequentially: a name for it, its estimated rows (-1: never
        analyzed), its heap blocks. A partitioned table's rows are its leaves'."""
        hit = [r for r in leaves if r.relname in _seq_scans(p, relnames)]
        if not hit:
            return "", 0, 0
        analyzed = [r.estimated_rows for r in hit if r.estimated_rows >= 0]
        name = (
            sweep.table
            if len(leaves) == 1
            else (f"{sweep.table} (partitions {', '.join(sorted(r.relname for r in hit))})")
        )
        return name, (sum(analyzed) if analyzed else -1), sum(r.blocks for r in hit)

    what, rows, blocks = scanned(plan)
    if not what:
        how = f"index {', '.join(used)}" if used else "no sequential scan"
        yield finding(CheckName.PLAN, PASS, subject, f"the batch reads {sweep.table} through {how}")
        return
    if rows < 0 and blocks == 0:
        yield finding(CheckName.PLAN, PASS, subject, f"Seq Scan of {what}, which is empty")
        return
    if rows < 0:
        yield finding(
            CheckName.PLAN,
            WARN,
            subject,
            f"Seq Scan of {what}, never analyzed: its size is unknown",
            f"ANALYZE {sweep.table.sql_text}",
        )
        return
    if rows <= limit:
        yield finding(
            CheckName.PLAN,
            PASS,
            subject,
            f"Seq Scan of {what}, small ({rows:,} rows <= seq_scan_max_rows {limit:,})",
        )
        return
    yield finding(
        CheckName.PLAN,
        FAIL,
        subject,
        f"Seq Scan of {what} ({rows:,} rows > seq_scan_max_rows {limit:,}): no index serves "
        "the batch, which reads all of it every time",
        index_statements(sweep),
    )

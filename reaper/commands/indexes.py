"""``reaper indexes ensure``: build the indexes the sweeps rely on without blocking writers.

Each index of ``sql/indexes.sql`` whose table exists is built with ``CREATE INDEX
CONCURRENTLY`` (writers go on; the build waits for them instead), one at a time, under the
session's lock_timeout and without a statement_timeout (a build takes as long as the table
needs). An index left INVALID by an interrupted build (a cancelled statement, a lost
connection, a unique build that met duplicates) is dropped with ``DROP INDEX CONCURRENTLY``
and built again. A session-level advisory lock keeps two runs from building at once.

It needs the table owner's rights (CREATE INDEX is DDL): run it as the role that owns the
control plane's tables, never as the ``reaper`` role of ``grants.sql``.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import structlog

from reaper import errors, sqltext
from reaper.db import Database, IndexLookup, Session, regclass_text
from reaper.sqltext import sqlinfo
from reaper.sqltext.names import quote_ident
from reaper.sqltext.sqlinfo import IndexSpec
from reaper.vocab import IndexOutcome, IndexStep

log = structlog.get_logger("reaper.indexes")

# The advisory lock key of `reaper indexes ensure`: a stable 63-bit number from its name, so
# that every reaper version and replica agrees on it.
LOCK_KEY = int.from_bytes(hashlib.sha256(b"reaper indexes ensure").digest()[:8], "big") >> 1
# How often the progress of a build is read from pg_stat_progress_create_index (seconds).
PROGRESS_INTERVAL_SECONDS = 0.5

PRESENT, CREATE, REBUILD, SKIP = (
    IndexStep.PRESENT,
    IndexStep.CREATE,
    IndexStep.REBUILD,
    IndexStep.SKIP,
)


@dataclass
class IndexAction:
    """What ``ensure`` found and did for one index.

    Attributes:
        index: the index's name; table: its table.
        action: ``present`` (valid and ready: nothing to do), ``create`` (absent), ``rebuild``
            (INVALID: drop concurrently, create again) or ``skip`` (table absent, or another
            session is building it right now).
        outcome: ``done``, ``dry_run``, ``failed`` or ``none`` (nothing to do).
        detail: one line on why.
        seconds: wall time of the drop and build.
    """

    index: str
    table: str
    action: IndexStep
    detail: str
    outcome: IndexOutcome = IndexOutcome.NONE
    seconds: float = 0.0
    error: str | None = None
    statements: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "index": self.index,
            "table": self.table,
            "action": self.action,
            "outcome": self.outcome,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
            "error": self.error,
            "statements": self.statements,
        }


# on_progress(spec, row): row is pg_stat_progress_create_index's phase, blocks_*, tuples_*,
# lockers_* for the build (an empty dict before the first reading).
ProgressFn = Callable[[IndexSpec, dict[str, Any]], None]


def _inspect(session: Session, spec: IndexSpec) -> IndexAction:
    if not session.scalar(sqltext.ops("table_exists"), {"table": regclass_text(spec.table)}):
        return IndexAction(spec.name, spec.table, SKIP, f"table {spec.table} does not exist")
    found = session.fetch(
        IndexLookup,
        sqltext.ops("index_lookup"),
        {"table": regclass_text(spec.table), "name": spec.name},
    )
    if not found:
        return IndexAction(
            spec.name, spec.table, CREATE, "absent", statements=[spec.concurrent_statement]
        )
    row = found[0]
    if row.valid and row.ready:
        return IndexAction(spec.name, spec.table, PRESENT, "valid and ready")
    if row.building:
        return IndexAction(spec.name, spec.table, SKIP, "another session is building it right now")
    qualified = f"{quote_ident(row.schema_name)}.{quote_ident(row.index_name)}"
    return IndexAction(
        spec.name,
        spec.table,
        REBUILD,
        f"INVALID (indisvalid={row.valid}, indisready={row.ready}): an interrupted build",
        statements=[f"DROP INDEX CONCURRENTLY IF EXISTS {qualified}", spec.concurrent_statement],
    )


def ensure(
    db: Database,
    *,
    dry_run: bool = False,
    specs: Sequence[IndexSpec] | None = None,
    on_progress: ProgressFn | None = None,
    on_action: Callable[[IndexAction], None] | None = None,
) -> list[IndexAction]:
    """Make every index of ``specs`` (default: ``indexes.sql``) exist, valid and ready.

    Args:
        db: the database; its role must own the tables (CREATE INDEX).
        dry_run: inspect and report what would be done; build nothing (no lock taken).
        specs: the indexes; tables that do not exist are skipped. Default: those of
            ``indexes.sql`` on the tables of schema ``public``.
        on_progress: called about every 0.5 s during a build with its progress row.
        on_action: called with each index's action before its build starts.

    Returns:
        One :class:`IndexAction` per index, in order. A failed build is reported there (and
        its INVALID leftover dropped when possible); the next index is still built.

    Raises:
        LockNotAcquired: another ``reaper indexes ensure`` is running.
        ConnectionFailed: the database cannot be reached.
    """
    specs = list(specs if specs is not None else sqlinfo.shipped_indexes())
    if dry_run:
        with db.session() as session:
            actions = [_inspect(session, s) for s in specs]
        for a in actions:
            if a.action in (CREATE, REBUILD):
                a.outcome = IndexOutcome.DRY_RUN
        return actions
    actions = []
    # No statement_timeout: a build takes as long as the table needs; lock_timeout still bounds
    # the wait for the table's lock (a migration holding it makes the build fail, not queue).
    with db.dedicated_session(statement_timeout=timedelta(0)) as build:
        if not build.scalar(sqltext.ops("advisory_try_lock"), {"key": LOCK_KEY}):
            raise errors.LockNotAcquired(
                "another `reaper indexes ensure` holds the advisory lock; wait for it to finish"
            )
        try:
            for spec in specs:
                action = _inspect(build, spec)
                actions.append(action)
                if on_action is not None:
                    on_action(action)
                if action.action in (CREATE, REBUILD):
                    _apply(db, build, spec, action, on_progress)
        finally:
            build.scalar(sqltext.ops("advisory_unlock"), {"key": LOCK_KEY})
    return actions


def _apply(
    db: Database,
    build: Session,
    spec: IndexSpec,
    action: IndexAction,
    on_progress: ProgressFn | None,
) -> None:
    started = time.monotonic()
    bound = log.bind(index=spec.name, table=spec.table, action=action.action)
    bound.info("index_build_started")
    try:
        if action.action == REBUILD:
            _drop_leftover(build, spec)
        _run_with_progress(db, build, spec, on_progress)
        action.outcome = IndexOutcome.DONE
    except errors.DatabaseError as exc:
        action.outcome, action.error = IndexOutcome.FAILED, str(exc)
        if isinstance(exc, errors.PrivilegeMissing):
            action.error += (
                " (CREATE INDEX is DDL: run `reaper indexes ensure` as the tables' owner)"
            )
        bound.error("index_build_failed", error=action.error)
        # A build that failed after its catalog entry was made leaves an INVALID index that
        # every write still maintains: drop it now (the next run builds it again).
        try:
            _drop_leftover(build, spec)
        except errors.DatabaseError as drop_exc:
            bound.warning("index_leftover_not_dropped", error=str(drop_exc))
    action.seconds = time.monotonic() - started
    if action.outcome == IndexOutcome.DONE:
        bound.info("index_build_finished", seconds=round(action.seconds, 3))


def _drop_leftover(session: Session, spec: IndexSpec) -> None:
    for row in session.fetch(
        IndexLookup,
        sqltext.ops("index_lookup"),
        {"table": regclass_text(spec.table), "name": spec.name},
    ):
        if not (row.valid and row.ready):
            session.drop_index_concurrently(row.schema_name, row.index_name)


def _run_with_progress(
    db: Database, build: Session, spec: IndexSpec, on_progress: ProgressFn | None
) -> None:
    if on_progress is None:
        build.execute(spec.concurrent_statement)
        return
    failure: list[BaseException] = []

    def work() -> None:
        try:
            build.execute(spec.concurrent_statement)
        except BaseException as exc:  # handed to the caller's thread below
            failure.append(exc)

    worker = threading.Thread(target=work, name=f"build-{spec.name}", daemon=True)
    worker.start()
    on_progress(spec, {})
    try:
        with db.session() as watcher:
            while worker.is_alive():
                worker.join(PROGRESS_INTERVAL_SECONDS)
                rows = watcher.rows(sqltext.ops("index_build_progress"), {"pid": build.backend_pid})
                if rows:
                    on_progress(spec, rows[0])
    except BaseException:
        # Ctrl-C or a lost watcher: cancel the build rather than leave it running unattended.
        build.cancel()
        worker.join()
        raise
    if failure:
        raise failure[0]

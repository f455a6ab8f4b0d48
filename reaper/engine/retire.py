"""Partition retention's second half: finish a detach left pending, then detach and drop
each partition that :func:`reaper.engine.partitions.plan` proves wholly past the cutoff.

Dropping is ``DETACH PARTITION ... CONCURRENTLY`` (plain DETACH before PostgreSQL 14 or
beside a DEFAULT partition) then ``DROP TABLE``, each under the session's lock_timeout and
statement_timeout. A detach left pending by an interrupted run is finished (``FINALIZE``) by
the next one. Each partition's step fails or waits on its own: PostgreSQL allows one pending
detach per parent, so while one waits for older snapshots (its FINALIZE, or a detach whose
second half gave up at lock_timeout), the other partitions of that parent wait for a later
run (``partition_detach_waiting``), their rows left to the row batches; the run goes on.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from reaper import errors, sqltext
from reaper.db import MIN_HEAP_WALK_VERSION as MIN_CONCURRENT_DETACH_VERSION
from reaper.db import Session, compose_relations
from reaper.engine.partitions import DROP, OFF, Partition, droppable, plan
from reaper.sqltext.names import TableName
from reaper.vocab import PartitionStep, RowsSource

if TYPE_CHECKING:
    from reaper.config.sweeps import Sweep
    from reaper.metrics import Metrics

log = structlog.get_logger("reaper.partitions")

# Partitions up to this size are counted before their detach, larger ones estimated:
# counting those costs what a drop avoids (docs/performance.md).
EXACT_COUNT_MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Removed:
    """One partition that a run removed (or, in a dry run, would remove).

    Attributes:
        partition: its ``schema.relname``.
        action: what was done to it.
        rows: its rows (counted just before the detach, or the catalog's estimate; a dry
            run's: the estimate).
        rows_source: ``count`` or ``estimate`` (None for a dry run, which only estimates).
    """

    partition: str
    action: PartitionStep
    rows: int
    rows_source: RowsSource | None = None

    def as_dict(self) -> dict[str, Any]:
        """As a result lists it (``run-once --json``): a run's ``{partition, action, rows,
        rows_source}``, a dry run's ``{partition, action, estimated_rows}``."""
        if self.rows_source is None:
            return {"partition": self.partition, "action": self.action, "estimated_rows": self.rows}
        return {
            "partition": self.partition,
            "action": self.action,
            "rows": self.rows,
            "rows_source": self.rows_source,
        }


def _statement(name: str, **relations: tuple[str, str]) -> Any:
    return compose_relations(
        sqltext.strip_comments(sqltext.read(f"partitions/{name}.sql")), **relations
    )


def _finish_pending(session: Session, p: Partition, bound: Any) -> None:
    t0 = time.monotonic()
    session.execute(
        _statement(
            "detach_finalize",
            parent=(p.parent_schema, p.parent_name),
            partition=(p.schema_name, p.relname),
        )
    )
    bound.warning(
        "partition_detach_finalized",
        partition=p.name,
        parent=p.parent_qualified,
        seconds=round(time.monotonic() - t0, 3),
    )


def retire(
    session: Session,
    sweep: Sweep,
    cutoffs: Mapping[str, datetime],
    *,
    dry_run: bool,
    metrics: Metrics | None,
    stop: threading.Event | None = None,
) -> list[Removed]:
    """Finish interrupted detaches, then drop (or detach) every partition of ``sweep``'s table
    that its bounds prove wholly past the ``cutoffs``; the row batches sweep the rest
    afterwards. Returns the partitions removed, in order.

    With ``dry_run`` nothing changes: the partitions it would drop are returned with their
    estimated rows. Otherwise each partition removed is returned with its rows (counted just
    before its detach when it holds at most EXACT_COUNT_MAX_BYTES of heap, else, or when the
    count runs past statement_timeout, the catalog's estimate), which are added to
    ``reaper_deleted_rows_total``, and counts one in ``reaper_dropped_partitions_total``,
    with one ``partition_dropped`` log line.

    A partition whose detach or drop fails (lock_timeout, statement_timeout, a privilege) is
    logged and left to the row batches; the run goes on. ``stop`` is checked before each
    partition: once set, the rest are left for the next run.

    Raises:
        ConnectionFailed: the connection is gone (the run fails as any batch would).
    """
    action = sweep.partition_action
    removed: list[Removed] = []
    if action == OFF:
        return removed
    step = PartitionStep.DROP if action == DROP else PartitionStep.DETACH
    bound = log.bind(sweep=sweep.name, table=sweep.table)
    now_plan = plan(session, sweep, cutoffs)
    if not now_plan.partitioned:
        return removed
    # Parents with a detach still pending: none of their other partitions can be detached.
    blocked: dict[int, str] = {}
    for p in now_plan.pending:
        if dry_run:
            removed.append(Removed(p.name, PartitionStep.FINALIZE_DETACH, max(p.estimated_rows, 0)))
            continue
        try:
            _finish_pending(session, p, bound)
        except errors.ConnectionFailed:
            raise
        except errors.DatabaseError as exc:
            bound.warning(
                "partition_detach_finalize_failed",
                partition=p.name,
                error=str(exc),
                error_type=type(exc).__name__,
            )
            blocked[p.parent] = p.name
            continue
        if action == DROP and droppable(p) and now_plan.refused is None:
            removed += _remove(
                session,
                sweep,
                p,
                max(p.estimated_rows, 0),
                step,
                metrics,
                bound,
                exact=now_plan.heap_bytes.get(p.relid, 0) <= EXACT_COUNT_MAX_BYTES,
                already_detached=True,
            )
    if now_plan.refused is not None:
        bound.warning(
            "partition_drop_refused",
            reason=now_plan.refused.reason,
            partitions=[p.name for p, _ in now_plan.drop],
        )
        return removed
    if not now_plan.drop:
        bound.debug("partition_drop_none", reason=now_plan.reason)
        return removed
    for p, estimated in now_plan.drop:
        if stop is not None and stop.is_set():
            return removed
        if dry_run:
            removed.append(Removed(p.name, step, estimated))
            continue
        if p.parent in blocked:
            bound.warning(
                "partition_detach_waiting",
                partition=p.name,
                parent=p.parent_qualified,
                pending=blocked[p.parent],
                reason=f"the detach of {blocked[p.parent]} is pending until the snapshots "
                "older than it end; the next run detaches this one, the row batches "
                "sweep its rows meanwhile",
            )
            continue
        exact = now_plan.heap_bytes.get(p.relid, 0) <= EXACT_COUNT_MAX_BYTES or (
            p.kind != "p" and p.estimated_rows < 0
        )  # never analyzed: no estimate to give
        done = _remove(session, sweep, p, estimated, step, metrics, bound, exact=exact)
        removed += done
        if not done and _left_pending(session, p):
            blocked[p.parent] = p.name
    return removed


def _left_pending(session: Session, p: Partition) -> bool:
    """Whether ``p``'s parent now has a detach pending (a failed ``DETACH ... CONCURRENTLY``
    whose second half gave up waiting for older snapshots leaves ``p`` so)."""
    return bool(
        session.values(
            sqltext.strip_comments(sqltext.read("partitions/pending_parents.sql")),
            {"parents": [p.parent]},
        )
    )


def _remove(
    session: Session,
    sweep: Sweep,
    p: Partition,
    estimated: int,
    action: PartitionStep,
    metrics: Metrics | None,
    bound: Any,
    *,
    exact: bool = True,
    already_detached: bool = False,
) -> list[Removed]:
    """Detach (unless ``already_detached``) and, for a drop, drop partition ``p``; returns
    it as removed, or nothing when its detach failed (logged: the batches sweep its rows)."""
    relation = (p.schema_name, p.relname)
    t0 = time.monotonic()
    rows, source = estimated, RowsSource.ESTIMATE
    try:
        # A partition too large to count within statement_timeout keeps the estimate.
        with contextlib.suppress(errors.StatementCanceled):
            if exact:
                rows = int(session.scalar(_statement("count_rows", partition=relation)))
                source = RowsSource.COUNT
        if not already_detached:
            concurrently = (
                session.server_version >= MIN_CONCURRENT_DETACH_VERSION and not p.parent_has_default
            )
            session.execute(
                _statement(
                    "detach_concurrently" if concurrently else "detach",
                    parent=(p.parent_schema, p.parent_name),
                    partition=relation,
                )
            )
    except errors.ConnectionFailed:
        raise
    except errors.DatabaseError as exc:
        bound.warning(
            "partition_drop_failed",
            partition=p.name,
            stage="detach",
            error=str(exc),
            error_type=type(exc).__name__,
        )
        return []
    dropped = False
    if action == PartitionStep.DROP:
        try:
            session.execute(_statement("drop", partition=relation))
            dropped = True
        except errors.ConnectionFailed:
            raise
        except errors.DatabaseError as exc:
            # Detached already: its rows are out of the table. The next run cannot find it.
            bound.error(
                "partition_drop_failed",
                partition=p.name,
                stage="drop",
                error=str(exc),
                error_type=type(exc).__name__,
                fix=f"DROP TABLE {TableName(p.schema_name, p.relname).sql_text}",
            )
    if metrics is not None:
        metrics.partition_removed(sweep.table, sweep.reason, rows)
    bound.info(
        "partition_dropped" if dropped else "partition_detached",
        partition=p.name,
        parent=p.parent_qualified,
        bound=p.bound,
        rows=rows,
        rows_source=source,
        action=action,
        seconds=round(time.monotonic() - t0, 3),
    )
    return [Removed(p.name, action, rows, source)]

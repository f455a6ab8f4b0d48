"""A run's body, once its cutoffs and statements are known: the full-table interlock, then
the count (a dry run) or the partitions and the batches of every heap.
"""

from __future__ import annotations

import logging

from reaper import errors, sqltext
from reaper.config.sweeps import Sweep
from reaper.db import Keep, Session, regclass_text
from reaper.engine import retire
from reaper.engine.batches import batch_strategy
from reaper.engine.context import Run
from reaper.engine.deleter import Deleter
from reaper.engine.interlock import (
    DeletionLedger,
    EligibleMeasure,
    TableWindow,
    judge_table,
    measure_eligible,
)
from reaper.engine.sizing import BatchSizer
from reaper.engine.strategy import choose_strategy
from reaper.vocab import StopReason

# The runner's logger: its debug level decides whether batches return their keys.
LOG_NAME = "reaper.runner"


def keep(sweep: Sweep) -> Keep:
    """What a run of ``sweep`` keeps of the rows it deletes.

    Their keys when the ``batch_keys`` line would be shown (the runner's log at debug
    level: returning them costs a batch about what its RETURNING costs, bench B1), its
    archive table's rows and its archive file's lines."""
    return Keep(
        keys=logging.getLogger(LOG_NAME).isEnabledFor(logging.DEBUG),
        key=sweep.key,
        archive=sweep.archive,
        lines=sweep.archive_file is not None,
    )


def execute(session: Session, run: Run, ledger: DeletionLedger) -> None:
    """The body of a run on its session (results into ``run.result``).

    ``ledger``: the rows deleted per table by this process
    (:func:`reaper.engine.interlock.refuse_table_window`); a dry run's own ledger, of the
    rows it counted, for a dry run."""
    spec, result = run.spec, run.result
    # The full-table interlock sees the table whole, partitions that could be dropped included:
    # dropping every partition empties a table as surely as deleting every row.
    measure = measure_eligible(session, spec.statements, spec.params)
    threshold = spec.sweep.max_eligible_fraction
    key = _table_key(session, spec.sweep)
    if spec.dry_run:
        _count(session, run, measure, threshold, ledger.window(key, measure.rows))
        if result.refusal is None:
            ledger.record(key, result.rows)
        return
    judge_table(
        session,
        spec.sweep,
        spec.statements,
        spec.params,
        measure,
        threshold,
        ledger.window(key, measure.rows),
    )
    # What the progress bar counts toward: the sample the run takes anyway, never a count of
    # its own before the first delete.
    result.estimated_backlog = round(measure.eligible)
    before = result.rows
    try:
        _delete(session, run, measure)
    finally:
        ledger.record(key, result.rows - before)
        # The run's rows are counted once durable (docs/metrics.md): wait for the last ones
        # (on a session of its own when this one failed: Sweeper.run).
        if run.tally.durable is not None:
            run.tally.durable.finish()


def _table_key(session: Session, sweep: Sweep) -> str:
    """The swept table's key in a :class:`DeletionLedger`: its oid ("big" and "public.big"
    are one table)."""
    return str(session.scalar(sqltext.engine("table_oid"), {"table": regclass_text(sweep.table)}))


def _retire(session: Session, run: Run) -> None:
    """The partitions wholly past the cutoff, removed (or, for a dry run, listed) into the
    run's result; none of an ordinary table (:attr:`SweepStatements.ordinary`)."""
    spec, result = run.spec, run.result
    if spec.statements.ordinary:
        return
    removed = retire.retire(
        session,
        spec.sweep,
        result.cutoffs,
        dry_run=spec.dry_run,
        metrics=run.tally.metrics,
        stop=run.gate.stop,
    )
    for p in removed:
        if not spec.dry_run:
            result.rows += p.rows
        result.partitions.append(p.as_dict())


def _count(
    session: Session,
    run: Run,
    measure: EligibleMeasure,
    threshold: float,
    window: TableWindow,
) -> None:
    """A dry run: the partitions a run would retire, the rows it would delete, and
    (``result.refusal``) whether the full-table interlock would stop it before its first
    delete, judged as a real run of the same invocation would be (:func:`judge_table`): the
    rows that the dry run's earlier sweeps counted in this table count as deleted
    (``window``, of the projected ledger). Exact when the sweeps of a table delete different
    rows; when they share rows, the refusal may be projected where a real run would go on
    (never the other way round)."""
    spec, result = run.spec, run.result
    _retire(session, run)
    result.rows = session.count_eligible(spec.statements, spec.params)
    result.stopped_by = StopReason.DONE
    try:
        judge_table(
            session,
            spec.sweep,
            spec.statements,
            spec.params,
            measure,
            threshold,
            window,
            projected=True,
            eligible=result.rows,
        )
    except errors.FullTableRefused as exc:
        result.refusal = str(exc)
        result.refusal_summary = exc.summary


def _delete(session: Session, run: Run, measure: EligibleMeasure) -> None:
    """Partitions retired, then the batches of every heap (results into ``run.result``)."""
    sweep, options, result = run.spec.sweep, run.spec.options, run.result
    _retire(session, run)
    if result.partitions:
        # The heaps that remain.
        run = run.with_statements(session.statements(sweep.predicate, keep(sweep)))
    sizer = BatchSizer(sweep.batch_size, options.statement_timeout_seconds)
    result.stopped_by = StopReason.DONE
    heaps = run.spec.statements.heaps
    for hs in heaps:
        strategy, fraction = choose_strategy(run, hs, sample=measure.samples.get(hs.heap.table))
        if strategy not in result.strategies:
            result.strategies.append(strategy)
        deleter = Deleter(run, hs, sizer)
        result.stopped_by = batch_strategy(strategy, options, fraction).run(deleter)
        if result.stopped_by != StopReason.DONE:
            break
    if not heaps:
        result.strategies = [sweep.strategy]

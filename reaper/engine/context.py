"""One run as one value: what it does, what it works with, what it counts, what stops it.

A run's functions (the strategy choice, the batches of each heap, the dry run's count) take
a :class:`Run`: its :class:`RunSpec` (frozen before the first batch), its
:class:`RunTools` (the session and the other collaborators), its :class:`Tally` and its
:class:`Gate`.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from reaper.config.engine import EngineOptions
from reaper.config.sweeps import Budget, Sweep
from reaper.db import BatchRows, SweepStatements
from reaper.engine.durable import DurableCount
from reaper.engine.gate import Gate
from reaper.engine.pacing import Pacer
from reaper.engine.port import BatchSession
from reaper.engine.result import SweepResult
from reaper.engine.tally import Tally
from reaper.engine.undeletable import UndeletableRows
from reaper.metrics import Metrics


@dataclass(frozen=True)
class RunSpec:
    """What one run of one sweep does, fixed before its first batch.

    Attributes:
        sweep: what is swept.
        statements: the sweep's statements, one set per heap it deletes from.
        params: the statements' parameters: each cutoff by name.
        options: the engine's options (timeouts, batch targets, thresholds, ``parallel``).
        budget: when it stops with work left.
        dry_run: count, delete nothing.
    """

    sweep: Sweep
    statements: SweepStatements
    params: Mapping[str, Any]
    options: EngineOptions
    budget: Budget = field(default_factory=Budget)
    dry_run: bool = False


@dataclass(frozen=True)
class RunTools:
    """What one run works with.

    Attributes:
        session: the connection that runs the batches (:class:`reaper.db.Session`, or a
            fake).
        clock: monotonic seconds (tests pin it).
        before_commit: called with each batch's rows before its COMMIT (the archive file's
            writer, :class:`reaper.engine.archive.LineArchive`; None: nothing).
        undeletable: the rows the process found undeletable, remembered across its runs
            (None: none kept, as for a dry run).
        helper_session: lends a heap walk's helper its own session, as a context manager
            (:meth:`reaper.db.Database.helper_session`; None: the run has only its own).
    """

    session: BatchSession
    clock: Callable[[], float] = time.monotonic
    before_commit: Callable[[BatchRows], None] | None = None
    undeletable: UndeletableRows | None = None
    helper_session: Callable[[], AbstractContextManager[BatchSession]] | None = None


@dataclass(frozen=True)
class Run:
    """One run of one sweep, on one session, from its cutoffs to its last batch.

    Build one with :meth:`begin`."""

    spec: RunSpec
    tools: RunTools
    tally: Tally
    gate: Gate

    @classmethod
    def begin(
        cls,
        spec: RunSpec,
        tools: RunTools,
        *,
        result: SweepResult | None = None,
        metrics: Metrics | None = None,
        on_batch: Callable[[SweepResult], None] | None = None,
        stop: threading.Event | None = None,
        pacer: Pacer | None = None,
        started: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Run:
        """A run of ``spec`` with ``tools``, its tally and its gate.

        Args:
            result: filled in as the run goes (None: a new one).
            metrics: counters to update per batch (None: none, as for a dry run).
            on_batch: called after every batch with the result so far (progress bars).
            stop: checked between batches; when set, the run ends after the batch in flight.
            pacer: called before each batch (None: pacing off).
            started: when the run began, on ``tools.clock`` (None: now).
            sleep: waits while the durable count polls.
        """
        sweep = spec.sweep
        if result is None:
            result = SweepResult(sweep.name, sweep.table, sweep.reason, dry_run=spec.dry_run)
        durable = None
        if metrics is not None:
            durable = DurableCount(
                tools.session,
                metrics,
                result.sweep,
                result.table,
                result.reason,
                clock=tools.clock,
                sleep=sleep,
            )
        tally = Tally(result, metrics=metrics, on_batch=on_batch, durable=durable)
        gate = Gate(
            spec.budget,
            tally,
            clock=tools.clock,
            started=tools.clock() if started is None else started,
            stop=stop,
            pacer=pacer,
            between=None if durable is None else durable.tick,
        )
        return cls(spec, tools, tally, gate)

    @property
    def result(self) -> SweepResult:
        """What the run did so far."""
        return self.tally.result

    def with_statements(self, statements: SweepStatements) -> Run:
        """This run on ``statements`` (the heaps left once partitions are retired)."""
        return dataclasses.replace(self, spec=dataclasses.replace(self.spec, statements=statements))

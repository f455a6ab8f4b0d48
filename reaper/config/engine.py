"""The engine's options, taken from the settings: the one place that turns a
:class:`Settings` into the :class:`EngineOptions` that :mod:`reaper.engine` reads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from reaper.config.settings import FULL_TABLE_MIN_ROWS, Settings

__all__ = ["FULL_TABLE_MIN_ROWS", "EngineOptions", "engine_options"]


@dataclass(frozen=True)
class EngineOptions:
    """What the engine reads of the settings, in the units it uses.

    Attributes:
        statement_timeout_seconds: a batch's statement_timeout (sizes batches after one).
        heap_walk_threshold: the garbage fraction from which a heap is walked.
        batch_target_seconds: how long a batch aims to take.
        busy_batch_seconds: the least a batch aims at while the database is busy.
        busy_share: the share of wall time batches take while it is busy (1.0: no pacing).
        max_replica_lag_seconds: how far a standby may fall behind (None: no pacing).
        max_wal_rate: WAL bytes a second the server may write (None: no brake).
        max_clock_skew: how far the database clock may be off (None: no check).
        parallel: connections a heap walk may delete on at once.
    """

    statement_timeout_seconds: float
    heap_walk_threshold: float
    batch_target_seconds: float
    busy_batch_seconds: float
    busy_share: float
    max_replica_lag_seconds: float | None
    max_wal_rate: float | None
    max_clock_skew: timedelta | None
    parallel: int


def engine_options(settings: Settings) -> EngineOptions:
    """``settings``' engine fields as one value."""
    lag, rate = settings.max_replica_lag, settings.max_wal_rate
    return EngineOptions(
        statement_timeout_seconds=settings.statement_timeout.total_seconds(),
        heap_walk_threshold=settings.heap_walk_threshold,
        batch_target_seconds=settings.batch_target_seconds.total_seconds(),
        busy_batch_seconds=settings.busy_batch_seconds.total_seconds(),
        busy_share=settings.busy_share,
        max_replica_lag_seconds=None if lag is None else lag.total_seconds(),
        max_wal_rate=None if rate is None else float(rate),
        max_clock_skew=settings.max_clock_skew,
        parallel=settings.parallel,
    )

"""Pacing: between two batches, a sweep yields to the database's replicas and live traffic.

The policy is pure: :class:`Pacer` is given a way to measure (a :class:`Sample` of the
server: its WAL position, each standby's replay position and lag, the sessions busy on the
swept database), a clock and a way to wait, so that tests drive it with fakes in
milliseconds. The runner calls it once before every batch (:func:`for_run` binds it to the
run's session, options and metrics); it measures again only when its last sample is
:data:`MAX_SAMPLE_AGE_SECONDS` old, or when a standby could have passed ``max_replica_lag``
by the end of the next batch since the last measurement (a lag grows at most one second per
second), so that a run alone on its database pays for about one sample a second, not one per
batch (bench B1: 5 ms a sample, 14% of the run at one per batch).

Two pacers, each a reason of ``reaper_throttled_seconds_total{sweep,reason}``
(:class:`reaper.vocab.ThrottleReason`):

- ``replica_lag``: no batch starts that would end with a standby more than
  ``max_replica_lag`` behind (its lag plus the last batch's duration, counted as at most half
  the limit); the run looks again every :data:`REPLICA_POLL_SECONDS` and resumes when every
  standby is back within that. A standby's lag is the larger of
  ``pg_stat_replication.replay_lag`` and the age of the oldest WAL it has not replayed: bytes
  behind are turned into seconds by the primary's own WAL positions, recorded with each
  sample (``replay_lag`` alone freezes at its last value while a standby's replay is stalled,
  and is NULL when it is unknown).
- ``load``: while other sessions use the swept database (a statement running, or finished
  within :data:`BUSY_WINDOW_SECONDS`), batches take at most ``busy_share`` of the run's wall
  time: a batch of t seconds is followed by a wait of t x (1 - share) / share. When nothing
  else runs, batches follow each other at once.

A wait never outlasts the run's budget (``max_seconds_per_run``) or a stop; without a time
budget, a run paused for a standby ends after :data:`MAX_PAUSE_SECONDS` with ``stopped_by =
replica_lag``, and the next run tries again.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from reaper import sqltext
from reaper.db.rows import Sample, Standby
from reaper.engine.load import (
    BASELINE_EVERY_SECONDS,
    BASELINE_HOLD_SECONDS,
    BASELINE_RETRIES,
    LoadControl,
)
from reaper.engine.walbrake import WalBrake
from reaper.vocab import StopReason, ThrottleReason

if TYPE_CHECKING:
    from reaper.config.engine import EngineOptions
    from reaper.metrics import Metrics

log = structlog.get_logger("reaper.pacing")


# A session that finished a statement this recently (seconds) is live traffic: a client that
# sends a statement every few milliseconds is idle most of the time, yet busy.
BUSY_WINDOW_SECONDS = 1.0
# While a standby is too far behind, look again this often (seconds); never less often than
# a tenth of max_replica_lag.
REPLICA_POLL_SECONDS = 0.5
# Without a time budget, a run paused for a standby gives up after this long (seconds).
MAX_PAUSE_SECONDS = 600.0
# The WAL positions kept to turn a standby's bytes behind into seconds: one per batch; an
# hour of them at 50 ms per batch.
HISTORY_LENGTH = 72_000
# A sample older than this (seconds) is taken again before the next batch: live traffic that
# starts is seen within a second, as is a standby that starts streaming.
MAX_SAMPLE_AGE_SECONDS = 1.0
# A standby at most this far behind (seconds), and at most a quarter of max_replica_lag,
# leaves the database idle (Pacer.idle).
IDLE_LAG_SECONDS = 1.0
# Two WAL positions recorded further apart than this (seconds) are not interpolated between.
MAX_INTERPOLATED_SECONDS = 5.0
# While other sessions use the database (or the WAL brake is on), a sample older than this
# (seconds) is taken again: the load controller decides about ten times a second on what the
# live statements suffered since the sample before, and the WAL brake sees a run's WAL within
# a tenth of a second.
BUSY_SAMPLE_AGE_SECONDS = 0.1
# A wait is counted in reaper_throttled_seconds_total a slice of at most this long at a time.
THROTTLE_SLICE_SECONDS = 1.0


class WalHistory:
    """The primary's WAL position over time (monotonic seconds, bytes), to date a position."""

    def __init__(self, length: int = HISTORY_LENGTH) -> None:
        self._times: list[float] = []
        self._lsns: list[int] = []
        self._length = length
        self._lock = threading.Lock()

    def record(self, at: float, lsn: int) -> None:
        """The primary was at ``lsn`` (bytes) at monotonic time ``at`` (seconds)."""
        with self._lock:
            if self._lsns and lsn < self._lsns[-1]:
                # Another server behind the same address (a failover): start again.
                self._times.clear()
                self._lsns.clear()
            self._times.append(at)
            self._lsns.append(lsn)
            if len(self._times) > self._length:
                drop = len(self._times) - self._length
                del self._times[:drop], self._lsns[:drop]

    def age(self, lsn: int, now: float) -> float:
        """Seconds for which WAL after position ``lsn`` has existed (0.0 when the primary never
        was past it): dated between the two records around ``lsn``, as if the WAL between them
        had been written at an even rate, so that the error is a fraction of one batch. Between
        records more than :data:`MAX_INTERPOLATED_SECONDS` apart (the gap between two runs)
        the later one is taken, and WAL older than the first record is dated at the first
        record: lower bounds, never a lag that was not there."""
        with self._lock:
            i = bisect.bisect_right(self._lsns, lsn)
            if i >= len(self._lsns):
                return 0.0
            written = self._times[i]
            if i > 0 and written - self._times[i - 1] <= MAX_INTERPOLATED_SECONDS:
                t0, l0, l1 = self._times[i - 1], self._lsns[i - 1], self._lsns[i]
                written = t0 + (written - t0) * (lsn - l0) / max(l1 - l0, 1)
            return max(now - written, 0.0)


def standby_lag(standby: Standby, history: WalHistory, now: float) -> float | None:
    """A standby's lag in seconds: the larger of its ``replay_lag`` and the age of the oldest
    WAL it has not replayed (:meth:`WalHistory.age`); None when this role cannot see it."""
    if not standby.visible:
        return None
    lag = standby.replay_lag or 0.0
    if standby.replay_lsn is not None:
        lag = max(lag, history.age(standby.replay_lsn, now))
    return lag


class Measure(Protocol):
    """Takes a :class:`Sample` of the server (may raise; the pacer then does not wait)."""

    def __call__(self) -> Sample: ...


class Pacer:
    """Decides, before each batch, whether and how long a run waits; then waits.

    Args:
        measure: takes a :class:`Sample`; an exception skips pacing for that batch.
        max_replica_lag: seconds a standby may be behind (None: no replica pacing).
        busy_share: fraction of wall time batches may take while other sessions are busy
            (1.0: no load pacing).
        clock: monotonic seconds.
        wait: waits up to the given seconds; returns True when the run is told to stop.
        throttled: called with ``(reason, seconds)`` after each wait.
        history: the primary's WAL positions (shared by the runs of one database).
        max_pause: without a time budget, the longest wait for a standby (seconds).
        max_sample_age: seconds a sample is reused for (see the module's docstring).
        told: the warnings already logged (``replica_lag_unknown``, ``load_unknown``,
            ``pacing_sample_failed``), shared by the runs of one database so that each is
            logged once per process.
        busy_batch_seconds: the least a batch aims at while other sessions are busy.
        batch_target_seconds: the most a batch aims at while they are busy (and their
            statements do not suffer): :class:`LoadControl`.
        brake: the WAL brake (None: none): the bucket of ``--max-wal-rate`` that the
            database's runs share (:meth:`Memory.brake`).
    """

    def __init__(
        self,
        measure: Measure,
        *,
        max_replica_lag: float | None,
        busy_share: float,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool],
        throttled: Callable[[ThrottleReason, float], None] = lambda reason, seconds: None,
        history: WalHistory | None = None,
        max_pause: float = MAX_PAUSE_SECONDS,
        max_sample_age: float = MAX_SAMPLE_AGE_SECONDS,
        told: set[str] | None = None,
        busy_batch_seconds: float = 0.002,
        batch_target_seconds: float = 0.05,
        brake: WalBrake | None = None,
    ) -> None:
        self.measure = measure
        self.max_replica_lag = max_replica_lag
        self.busy_share = busy_share
        self.clock = clock
        self.wait = wait
        self.throttled = throttled
        self.history = history or WalHistory()
        self.max_pause = max_pause
        self.max_sample_age = max_sample_age
        self.peak_lag = 0.0
        # Other sessions used the database at the last sample (and load pacing is on): the
        # runner then keeps batches short (busy_batch_seconds).
        self.busy = False
        # The last sample, when it was taken (clock seconds) and its worst standby lag.
        self._last: Sample | None = None
        self._last_at = 0.0
        self._last_lag = 0.0
        self.waited: dict[ThrottleReason, float] = dict.fromkeys(ThrottleReason, 0.0)
        # Warnings already logged (shared by the runs of one database: logged once).
        self._told: set[str] = told if told is not None else set()
        self.control = LoadControl(busy_batch_seconds, batch_target_seconds, busy_share)
        self.brake = brake
        # When the run's first batch started (None: none yet), when the baseline was last
        # measured, and the sample the load controller last judged.
        self._batched = False
        self._baseline_at: float | None = None
        self._baseline_retries = 0
        # Batches started since the last sample (the WAL brake's measure of a batch's WAL).
        self._unsampled = 0
        self._judged: Sample | None = None
        self._previous_at: float | None = None

    @property
    def aim(self) -> float:
        """Seconds a batch aims at while other sessions are busy (:class:`LoadControl`)."""
        return self.control.aim

    def _max_age(self) -> float:
        if self.busy or self.brake is not None:
            return min(self.max_sample_age, BUSY_SAMPLE_AGE_SECONDS)
        return self.max_sample_age

    def _sample(self) -> Sample | None:
        try:
            s = self.measure()
        except Exception as exc:  # a failed measurement never fails the sweep
            self._once("pacing_sample_failed", error=str(exc))
            return None
        if s.wal_lsn is not None:
            self.history.record(self.clock(), s.wal_lsn)
            if self.brake is not None:
                self.brake.written(s.wal_lsn, self.clock(), self._unsampled)
        self._unsampled = 0
        if self.max_replica_lag is not None and any(not sb.visible for sb in s.standbys):
            self._once(
                "replica_lag_unknown",
                standbys=[sb.name for sb in s.standbys if not sb.visible],
                fix=f"as a superuser: GRANT pg_read_all_stats TO the reaper role "
                f"(see {sqltext.where('grants.sql')})",
            )
        if self.busy_share < 1.0 and s.hidden_sessions:
            self._once(
                "load_unknown",
                hidden_sessions=s.hidden_sessions,
                fix=f"as a superuser: GRANT pg_read_all_stats TO the reaper role "
                f"(see {sqltext.where('grants.sql')})",
            )
        return s

    def _current(self, next_batch_seconds: float | None) -> Sample | None:
        """The last sample while it still answers, else a new one (None: measuring failed).

        Reused while younger than ``max_sample_age`` and while no standby can be past the
        lag at which a batch may start (:meth:`_ceiling`) by the end of the next batch: a lag
        grows by at most the time passed (WAL not replayed ages with the clock; ``replay_lag``
        reports the age a replayed record had), so the lag then is at most the last one plus
        the time since the sample plus ``next_batch_seconds``."""
        now = self.clock()
        if self._last is not None:
            age = now - self._last_at
            fresh = 0.0 <= age < self._max_age()
            if fresh and self.max_replica_lag is not None:
                fresh = self._last_lag + age + (next_batch_seconds or 0.0) <= self._ceiling(
                    next_batch_seconds
                )
            if fresh and self.brake is not None:
                fresh = self.brake.covers(self._unsampled + 1, now)
            if fresh:
                return self._last
        sample = self._sample()
        self._previous_at = self._last_at if self._last is not None else None
        self._last, self._last_at = sample, now
        self._last_lag = self.lag(sample)[0] if sample is not None else 0.0
        return sample

    def idle(self) -> bool:
        """Whether the database was idle at the last measurement, as this pacer sees it: a
        sample taken, no live traffic (when load pacing is on), no standby more than
        IDLE_LAG_SECONDS or a quarter of ``max_replica_lag`` behind (when replica pacing is
        on), no WAL owed to the brake (when it is on). A run uses its extra connections only then
        (:meth:`reaper.engine.gate.Gate.idle`)."""
        if self._last is None or self.busy:
            return False
        if self.brake is not None and self.brake.owed(self.clock()) > 0:
            return False
        if self.max_replica_lag is None:
            return True
        return self._last_lag <= min(IDLE_LAG_SECONDS, self.max_replica_lag / 4)

    def _ceiling(self, batch_seconds: float | None) -> float:
        """The largest lag (seconds) at which a batch of ``batch_seconds`` may start: the
        standby's lag grows by up to the batch's duration meanwhile, and must still be within
        ``max_replica_lag`` at its end. The duration counts as at most half the limit, so that
        a standby that catches up always lets the run resume."""
        assert self.max_replica_lag is not None
        return self.max_replica_lag - min(batch_seconds or 0.0, self.max_replica_lag / 2)

    def _once(self, event: str, **fields: Any) -> None:
        if event not in self._told:
            self._told.add(event)
            log.warning(event, **fields)

    def lag(self, sample: Sample) -> tuple[float, str | None]:
        """``(seconds, standby)``: the furthest-behind visible standby of ``sample``."""
        now = self.clock()
        worst, name = 0.0, None
        for sb in sample.standbys:
            lag = standby_lag(sb, self.history, now)
            if lag is not None and lag > worst:
                worst, name = lag, sb.name
        self.peak_lag = max(self.peak_lag, worst)
        return worst, name

    def _spend(self, reason: ThrottleReason, seconds: float) -> bool:
        """Wait ``seconds`` for ``reason``, counted a slice of at most
        :data:`THROTTLE_SLICE_SECONDS` at a time (so that
        ``reaper_throttled_seconds_total`` grows while a long wait goes on, not only when it
        ends); True when told to stop."""
        end = self.clock() + seconds
        while True:
            left = end - self.clock()
            if left <= 0:
                return False
            t0 = self.clock()
            stopped = self.wait(min(left, THROTTLE_SLICE_SECONDS))
            waited = max(self.clock() - t0, 0.0)
            self.waited[reason] += waited
            self.throttled(reason, waited)
            if stopped:
                return True

    def __call__(
        self, last_batch_seconds: float | None, deadline: float | None
    ) -> StopReason | None:
        """Before a batch: wait while a standby is too far behind, then for the load.

        Args:
            last_batch_seconds: how long the batch before took (None: this is the first).
            deadline: monotonic time at which the run's budget ends (None: no time budget).

        Returns:
            ``replica_lag`` when the run must end still waiting for a standby (its budget or
            :data:`MAX_PAUSE_SECONDS` ran out), else None (go on, or check the budget).
        """
        sample = self._current(last_batch_seconds)
        # The baseline is measured from the second batch beside live traffic on: the first
        # waits no longer than load pacing asks.
        was_busy = self.busy and self._batched
        self.busy = sample is not None and self.busy_share < 1.0 and sample.busy_sessions > 0
        if self.busy and not was_busy and self._batched:
            self.control.restart()
            self._baseline_at = None
            self._baseline_retries = 0
        if sample is None:
            return None
        if self.max_replica_lag is not None:
            paused_at = self.clock()
            limit = paused_at + self.max_pause
            if deadline is not None:
                limit = min(limit, deadline)
            ceiling = self._ceiling(last_batch_seconds)
            lag, name = self.lag(sample)
            if lag > ceiling:
                log.info(
                    "replica_lag_pause",
                    standby=name,
                    lag_seconds=round(lag, 3),
                    max_replica_lag_seconds=self.max_replica_lag,
                )
            while lag > ceiling:
                left = limit - self.clock()
                if left <= 0:
                    return StopReason.REPLICA_LAG
                poll = min(REPLICA_POLL_SECONDS, self.max_replica_lag / 10, left)
                if self._spend(ThrottleReason.REPLICA_LAG, poll):
                    return None
                sample = self._sample()
                self._last, self._last_at = sample, self.clock()
                if sample is None:
                    return None
                lag, name = self.lag(sample)
                self._last_lag = lag
                if lag <= ceiling:
                    log.info(
                        "replica_lag_resume",
                        lag_seconds=round(lag, 3),
                        paused_seconds=round(self.clock() - paused_at, 3),
                    )
        idle_since = self.clock()
        if self.busy:
            self._judge(sample)
        if self.busy and last_batch_seconds:
            pause = self.control.wait_after(last_batch_seconds)
            if deadline is not None:
                pause = min(pause, deadline - self.clock())
            if pause > 0 and self._spend(ThrottleReason.LOAD, pause):
                return None
        if (
            self.busy
            and was_busy
            and self._baseline_due()
            and self._measure_baseline(idle_since, deadline)
        ):
            return None
        if self.brake is not None:
            owed = self.brake.owed(self.clock())
            if deadline is not None:
                owed = min(owed, deadline - self.clock())
            if owed > 0:
                self._spend(ThrottleReason.WAL, owed)
        self._batched = True
        self._unsampled += 1
        return None

    def _judge(self, sample: Sample) -> None:
        """While busy: feed the load controller what the live statements suffered since the
        sample before (once per sample). Before the run's first batch, every statement the
        sample saw ran without the run: they are the baseline."""
        if sample is self._judged:
            return
        self._judged = sample
        if not self._batched:
            self.control.unexposed([took for took, _ in sample.statements])
            self._baseline_at = self.clock()
            return
        if self._previous_at is None:
            return
        since = self._last_at - self._previous_at
        self.control.observe([took for took, ago in sample.statements if ago < since])

    def _baseline_due(self) -> bool:
        if self.control.baseline_short and self._baseline_retries < BASELINE_RETRIES:
            self._baseline_retries += 1
            return True
        return (
            self._baseline_at is None or self.clock() - self._baseline_at >= BASELINE_EVERY_SECONDS
        )

    def _measure_baseline(self, idle_since: float, deadline: float | None) -> bool:
        """Hold still until :data:`BASELINE_HOLD_SECONDS` passed since ``idle_since`` (the
        last batch's end), then take the latency of the live statements that ran entirely
        meanwhile as the baseline. True when told to stop."""
        self._baseline_at = self.clock()
        hold = idle_since + BASELINE_HOLD_SECONDS - self.clock()
        if deadline is not None:
            hold = min(hold, deadline - self.clock())
        if hold > 0 and self._spend(ThrottleReason.LOAD, hold):
            return True
        later = self._sample()
        if later is None:
            return False
        idle = self.clock() - idle_since
        self._previous_at, self._last, self._last_at = self._last_at, later, self.clock()
        self._judged = later
        self.control.unexposed([took for took, ago in later.statements if took + ago <= idle])
        return False


class Memory:
    """What the pacers of one database's runs share, kept by the process
    (:class:`reaper.engine.run.Sweeper`): the primary's WAL positions, so that a run that
    starts while a standby is behind already knows how old the WAL it lacks is; and the
    warnings already logged, so that each is logged once; and the WAL brake's bucket."""

    def __init__(self) -> None:
        self.history = WalHistory()
        self.told: set[str] = set()
        self._brake: WalBrake | None = None
        self._lock = threading.Lock()

    def brake(self, rate: float, now: float) -> WalBrake:
        """The WAL brake's bucket of ``rate`` bytes a second that every run on the database
        shares (a new one, full, when the rate changed: a reload)."""
        with self._lock:
            if self._brake is None or self._brake.rate != rate:
                self._brake = WalBrake(rate, now)
            return self._brake


class _SampleSource(Protocol):
    def pacing_sample(self, busy_window: float) -> Sample: ...


def for_run(
    memory: Memory,
    session: _SampleSource,
    options: EngineOptions,
    sweep: str,
    metrics: Metrics | None,
    stop: threading.Event | None,
) -> Pacer | None:
    """The pacer of one run of ``sweep`` on ``session`` (None when every pacer is off), with
    the ``memory`` of its database.

    Waits end early when ``stop`` is set; each wait is added to ``metrics``'
    ``reaper_throttled_seconds_total{sweep,reason}``.
    """
    lag, rate = options.max_replica_lag_seconds, options.max_wal_rate
    if lag is None and options.busy_share >= 1.0 and rate is None:
        return None
    event = stop or threading.Event()

    def throttled(reason: ThrottleReason, seconds: float) -> None:
        if metrics is not None:
            metrics.throttled(sweep, reason, seconds)

    return Pacer(
        lambda: session.pacing_sample(BUSY_WINDOW_SECONDS),
        max_replica_lag=lag,
        busy_share=options.busy_share,
        wait=event.wait,
        throttled=throttled,
        history=memory.history,
        told=memory.told,
        busy_batch_seconds=options.busy_batch_seconds,
        batch_target_seconds=options.batch_target_seconds,
        brake=None if rate is None else memory.brake(rate, time.monotonic()),
    )

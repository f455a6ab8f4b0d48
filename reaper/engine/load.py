"""The load pacer's controller: how long a batch aims to take and what share of wall time
batches take while other sessions use the database, from what their statements suffer.

Pure: :class:`LoadControl` is fed latencies and answers with numbers
(:class:`reaper.engine.pacing.Pacer` measures and waits).
"""

from __future__ import annotations

from collections.abc import Sequence

# Live traffic suffers when the 90th percentile of the latencies of its statements (pooled
# until there are JUDGED_STATEMENTS of them) is more than HARM_RATIO times the 95th
# percentile of their baseline, and at least HARM_MIN_SECONDS more. The statements the pacer
# sees are those that ended just before it samples, just after a batch: nearly all ran beside
# that batch, while the clients' own percentiles count every statement, most of which ran
# while reaper waited. So what is judged is whether the statements that ran beside a batch
# took longer than the slowest few that ran without one, as the live traffic's own p99
# would show (bench B4 on a 2-core machine: 0.8 ms median, 2.6-5 ms p90 with no sweep).
HARM_RATIO = 1.5
HARM_MIN_SECONDS = 0.0005
HARM_QUANTILE = 0.9
BASELINE_QUANTILE = 0.95
# Eight: with six clients, a judgement about every 0.15 s, so that a slow start reaches the
# batch target within a second (bench B4's whole unpaced sweep takes one).
JUDGED_STATEMENTS = 8
# Each judgement takes the median of the last JUDGED_POOLS pools' ratios to the baseline: one
# pool that a stall of the machine made slow does not halve the batches (on a shared 2-core
# machine, half of single pools were judged harmed whatever the sweep did).
JUDGED_POOLS = 3
# The baseline is the latency of live statements that ran while the run deleted nothing:
# those that ended before the run's first batch, then every BASELINE_EVERY_SECONDS while the
# database is busy, those that ran within a hold of BASELINE_HOLD_SECONDS without a batch
# (1% of the run's time). Its percentile is taken over the last BASELINE_KEPT of them.
BASELINE_EVERY_SECONDS = 10.0
BASELINE_HOLD_SECONDS = 0.1
BASELINE_KEPT = 32
# ... and while fewer than BASELINE_MIN make it, it is measured again before the next batch
# (a hold of BASELINE_HOLD_SECONDS), at most BASELINE_RETRIES times a run: the percentile of
# the few statements one sample sees (one per session) swung from 1.9 to 4.7 ms between runs
# of bench B4, and with it every judgement (a paced round then took 2 s or 13 s).
BASELINE_MIN = 16
BASELINE_RETRIES = 2
# While live traffic does not suffer, the batches' aim doubles at each judgement until it first
# suffers (a slow start, as TCP's), then grows by 1/GROWTH_STEPS of the way from
# --busy-batch-seconds to --batch-target-seconds (additive increase); their share of wall time
# grows by 1/GROWTH_STEPS of --busy-share. A judgement at which it suffers halves both
# (multiplicative decrease).
GROWTH_STEPS = 16
# The batches' share of wall time never falls below this fraction of --busy-share: the aim
# is what mostly decides how long a statement waits beside a batch.
MIN_SHARE_FRACTION = 0.5


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class LoadControl:
    """The load pacer's feedback controller (AIMD): how long a batch aims to take and what
    share of wall time batches take while other sessions use the database, from what their
    statements suffer.

    Starts where the pacer's guarantees are strictest (batches aim at ``floor``, share
    ``share_cap``). Latencies of live statements are pooled until there are
    :data:`JUDGED_STATEMENTS`; the pool is then judged: unharmed while its
    :data:`HARM_QUANTILE` percentile is within :data:`HARM_RATIO` of the baseline's
    :data:`BASELINE_QUANTILE` percentile (the median of the last :data:`JUDGED_POOLS`
    pools' ratios; see
    :data:`GROWTH_STEPS` for how both grow, up to ``ceiling`` and ``share_cap``), harmed
    otherwise (both halved, down to ``floor`` and ``share_cap`` x :data:`MIN_SHARE_FRACTION`).
    Pure: tested with plain numbers.

    Args:
        floor: the least a batch aims at (seconds, ``--busy-batch-seconds``).
        ceiling: the most (seconds, ``--batch-target-seconds``; at least ``floor``).
        share_cap: the largest share of wall time batches take (``--busy-share``).
    """

    def __init__(self, floor: float, ceiling: float, share_cap: float) -> None:
        self.floor = floor
        self.ceiling = max(ceiling, floor)
        self.share_cap = share_cap
        self.aim = floor
        self.share = share_cap
        self._baseline: list[float] = []
        self._pool: list[float] = []
        self._ratios: list[float] = []
        self.slow_start = True
        self.harmed = 0
        self.unharmed = 0

    @property
    def baseline(self) -> float | None:
        """The :data:`BASELINE_QUANTILE` percentile of the live statements' latency while the
        run deletes nothing (seconds; None: not measured yet)."""
        return _quantile(self._baseline, BASELINE_QUANTILE) if self._baseline else None

    @property
    def baseline_short(self) -> bool:
        """Whether fewer than :data:`BASELINE_MIN` statements make the baseline: the pacer
        measures it again before the next batch."""
        return len(self._baseline) < BASELINE_MIN

    def unexposed(self, latencies: Sequence[float]) -> None:
        """Latencies (seconds) of live statements that ran while the run deleted nothing."""
        self._baseline = [*self._baseline, *latencies][-BASELINE_KEPT:]

    def observe(self, latencies: Sequence[float]) -> bool | None:
        """Latencies (seconds) of the live statements that ended since the last call: once
        :data:`JUDGED_STATEMENTS` are pooled, True when they suffered (the aim and share are
        halved), False when not (both grow); None while the pool fills or without a
        baseline (nothing changes)."""
        base = self.baseline
        if base is None:
            return None
        self._pool.extend(latencies)
        if len(self._pool) < JUDGED_STATEMENTS:
            return None
        seen, self._pool = _quantile(self._pool, HARM_QUANTILE), []
        limit = max(base * HARM_RATIO, base + HARM_MIN_SECONDS)
        self._ratios = [*self._ratios, seen / limit][-JUDGED_POOLS:]
        if len(self._ratios) < JUDGED_POOLS:
            # Too few pools since the run began or the last halving to judge harm; a slow
            # start goes on while every one of them was unharmed.
            if not self.slow_start or max(self._ratios) > 1.0:
                return None
            suffered = False
        else:
            suffered = _median(self._ratios) > 1.0
        if suffered:
            self.harmed += 1
            self.slow_start = False
            self.aim = max(self.floor, self.aim / 2)
            self.share = max(self.share_cap * MIN_SHARE_FRACTION, self.share / 2)
            # The pools that decided this were judged at the former aim: the next decision
            # waits for pools of the new one, so one bad spell halves once, not once a pool.
            self._ratios = []
        else:
            self.unharmed += 1
            step = self.aim if self.slow_start else (self.ceiling - self.floor) / GROWTH_STEPS
            self.aim = min(self.ceiling, self.aim + step)
            self.share = min(self.share_cap, self.share + self.share_cap / GROWTH_STEPS)
        return suffered

    def restart(self) -> None:
        """Live traffic came back after a quiet spell: start again from the strictest aim
        and the full share, with a slow start (the baseline is kept until measured again)."""
        self.aim, self.share, self.slow_start = self.floor, self.share_cap, True
        self._pool, self._ratios = [], []

    def wait_after(self, batch_seconds: float) -> float:
        """Seconds to wait after a batch of ``batch_seconds`` so that batches take at most
        :attr:`share` of the wall time."""
        return batch_seconds * (1.0 - self.share) / self.share

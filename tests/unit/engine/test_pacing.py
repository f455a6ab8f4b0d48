"""The pacing policy (reaper.engine.pacing), driven with a fake clock and fake samples: no database,
no sleeping."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from reaper.db import Sample, Standby
from reaper.engine.pacing import MAX_PAUSE_SECONDS, Pacer, WalHistory, standby_lag


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []
        self.stop_after: int | None = None

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += seconds
        return self.stop_after is not None and len(self.waits) >= self.stop_after


class Primary:
    """A primary whose WAL advances by ``rate`` bytes per second of the fake clock, and one
    standby that replays it, or not (``paused``)."""

    def __init__(self, clock: FakeClock, rate: int = 1_000_000) -> None:
        self.clock = clock
        self.rate = rate
        self.start = clock.now
        self.paused_at: float | None = None
        self.busy = 0
        self.visible = True
        self.replay_lag: float | None = 0.01

    def lsn_at(self, t: float) -> int:
        return int((t - self.start) * self.rate)

    def sample(self) -> Sample:
        replayed = self.lsn_at(self.clock.now if self.paused_at is None else self.paused_at)
        return Sample(
            wal_lsn=self.lsn_at(self.clock.now),
            standbys=(Standby("standby1", self.visible, replayed, self.replay_lag),),
            busy_sessions=self.busy,
        )


def feed(pacer: Pacer, primary: Primary) -> None:
    """The WAL positions the earlier batches of the run recorded, one a second."""
    t = primary.start
    while t < primary.clock.now:
        pacer.history.record(t, primary.lsn_at(t))
        t += 1.0


def make_pacer(
    clock: FakeClock,
    measure: Callable[[], Sample],
    *,
    lag: float | None = 10.0,
    share: float = 1.0,
    throttled: list[tuple[str, float]] | None = None,
) -> Pacer:
    got = throttled if throttled is not None else []
    return Pacer(
        measure,
        max_replica_lag=lag,
        busy_share=share,
        clock=clock,
        wait=clock.wait,
        throttled=lambda reason, s: got.append((reason, s)),
    )


def test_nothing_else_runs_no_wait() -> None:
    clock = FakeClock()
    primary = Primary(clock)
    pacer = make_pacer(clock, primary.sample, share=0.5)
    for _ in range(100):
        assert pacer(0.05, None) is None
        clock.now += 0.05
    assert clock.waits == []


def test_live_traffic_limits_the_batches_share_of_time() -> None:
    clock = FakeClock()
    primary = Primary(clock)
    primary.busy = 3
    throttled: list[tuple[str, float]] = []
    pacer = make_pacer(clock, primary.sample, share=0.25, throttled=throttled)
    assert pacer(None, None) is None  # before the first batch: nothing to pace against
    assert clock.waits == []
    assert pacer(0.04, None) is None
    assert clock.waits == [pytest.approx(0.12)]  # 0.04 x (1 - 0.25) / 0.25
    assert throttled == [("load", pytest.approx(0.12))]
    assert pacer.waited["load"] == pytest.approx(0.12)
    primary.busy = 0
    clock.now += 1.0  # the next sample, a second later
    assert pacer(0.04, None) is None
    assert len(clock.waits) == 1  # traffic gone: no wait


def test_alone_one_sample_a_second_not_one_per_batch() -> None:
    clock = FakeClock()
    primary = Primary(clock)
    taken: list[float] = []

    def measure() -> Sample:
        taken.append(clock.now)
        return primary.sample()

    pacer = make_pacer(clock, measure, lag=10.0, share=0.5)
    for _ in range(200):  # 10 s of 50 ms batches
        assert pacer(0.05, None) is None
        clock.now += 0.05
    assert 9 <= len(taken) <= 11
    # At most a second and one batch apart.
    assert all(b - a <= 1.05 + 1e-9 for a, b in itertools.pairwise(taken))


def test_traffic_that_starts_is_seen_within_a_second() -> None:
    clock = FakeClock()
    primary = Primary(clock)
    pacer = make_pacer(clock, primary.sample, lag=None, share=0.5)
    pacer(0.05, None)
    primary.busy = 2
    started = clock.now
    while not clock.waits:
        pacer(0.05, None)
        clock.now += 0.05
    assert clock.now - started <= 1.0 + 3 * 0.05 + 1e-9  # a batch, the wait, a batch


def test_samples_every_batch_once_a_standby_nears_the_limit() -> None:
    clock = FakeClock()
    primary = Primary(clock)
    primary.paused_at = clock.now  # replay stalled now: the lag grows with the clock
    taken: list[float] = []

    def measure() -> Sample:
        taken.append(clock.now)
        return primary.sample()

    pacer = make_pacer(clock, measure, lag=2.0)
    clock.stop_after = 1  # the run is stopped at its first pause
    ends: list[float] = []
    while True:
        assert pacer(0.2, None) is None
        if clock.waits:
            break
        clock.now += 0.2  # the batch
        ends.append(clock.now)
    # No batch ended past the limit, and the pause came within one batch of it.
    assert all(end - primary.paused_at <= 2.0 + 1e-9 for end in ends)
    assert ends[-1] - primary.paused_at > 2.0 - 0.2 - 1e-9
    # Measured once a second while far from it, every batch close to it.
    assert len(taken) < len(ends)


@pytest.mark.parametrize("batch", [0.01, 0.3, 0.9, 2.5])
def test_no_batch_ends_past_the_limit_and_a_long_batch_still_resumes(batch: float) -> None:
    """A batch starts only while the standby's lag plus the batch's duration is within the
    limit; a batch longer than half the limit counts as half, so the run resumes once the
    standby is back within half the limit."""
    clock = FakeClock()
    primary = Primary(clock)
    primary.paused_at = clock.now
    resume_at = clock.now + 5.0
    pacer = make_pacer(clock, primary.sample, lag=2.0)
    ends: list[float] = []
    resumed: list[float] = []

    def wait(seconds: float) -> bool:
        clock.wait(seconds)
        if clock.now >= resume_at:
            primary.paused_at = None
        return False

    pacer.wait = wait
    for _ in range(10_000):
        assert pacer(batch if ends else None, None) is None
        if primary.paused_at is None and not resumed:
            resumed.append(clock.now)
        clock.now += batch
        ends.append(clock.now)
        if resumed and clock.now > resume_at + 3 * batch + 1.0:
            break
    stalled = [e - resume_at + 5.0 for e in ends if e < resume_at]
    if batch <= 1.0:
        assert all(end <= 2.0 + 1e-9 for end in stalled)
        assert max(stalled) > 2.0 - 2 * batch - 1e-9  # it went on until close to the limit
    else:
        assert stalled == [batch]  # the first batch (no duration known yet), then a pause
    assert resumed and ends[-1] > resume_at  # caught up: the run goes on


def test_a_long_wait_is_counted_while_it_goes_on() -> None:
    """A 3.5 s wait adds to reaper_throttled_seconds_total each second, not once at its end:
    a sweep held back for a minute does not look unthrottled meanwhile."""
    clock = FakeClock()
    primary = Primary(clock)
    primary.busy = 1
    got: list[tuple[str, float]] = []
    pacer = make_pacer(clock, primary.sample, share=0.125, throttled=got)
    pacer(0.5, None)  # 0.5 s x (1 - 0.125) / 0.125
    assert [s for _, s in got] == [pytest.approx(x) for x in (1.0, 1.0, 1.0, 0.5)]
    assert {reason for reason, _ in got} == {"load"}


def test_load_wait_never_outlasts_the_budget() -> None:
    clock = FakeClock()
    primary = Primary(clock)
    primary.busy = 1
    pacer = make_pacer(clock, primary.sample, share=0.1)
    pacer(1.0, clock.now + 2.0)
    # 9 s asked, 2 s of budget left: waited in slices, each counted as it ends.
    assert sum(clock.waits) == pytest.approx(2.0) and max(clock.waits) <= 1.0


def test_pauses_while_a_standby_is_behind_and_resumes_when_it_catches_up() -> None:
    clock = FakeClock()
    primary = Primary(clock)
    pacer = make_pacer(clock, primary.sample, lag=10.0)
    # Batches run; the standby replays along.
    for _ in range(20):
        assert pacer(0.05, None) is None
        clock.now += 0.05
    assert clock.waits == []
    # Its replay stalls: replay_lag keeps its last value (as pg_stat_replication does); the
    # bytes behind, dated by the primary's own positions, grow with time.
    primary.paused_at = clock.now
    resume_at = clock.now + 40.0
    first_wait: list[float] = []

    def wait(seconds: float) -> bool:
        if not first_wait:
            first_wait.append(clock.now)
        stopped = clock.wait(seconds)
        if clock.now >= resume_at:
            primary.paused_at = None  # replay resumed and caught up
        return stopped

    pacer.wait = wait
    batches = 0
    while not first_wait:
        assert pacer(0.05, None) is None
        clock.now += 0.05  # the batch
        batches += 1
    # It stopped within one batch before the lag passed 10 s: no batch ended past it.
    assert 10.0 - 0.05 - 1e-6 <= first_wait[0] - (resume_at - 40.0) <= 10.0 + 1e-6
    assert clock.now >= resume_at
    assert pacer.waited["replica_lag"] >= 30.0
    assert pacer.peak_lag >= 10.0
    assert max(clock.waits) <= 1.0  # it looked again at least every second


def test_paused_run_ends_at_its_budget_and_says_why() -> None:
    clock = FakeClock()
    primary = Primary(clock)
    primary.paused_at = clock.now
    clock.now += 60.0  # the standby stalled a minute ago
    pacer = make_pacer(clock, primary.sample, lag=10.0)
    feed(pacer, primary)
    deadline = clock.now + 7.0
    assert pacer(0.05, deadline) == "replica_lag"
    assert clock.now == pytest.approx(deadline)
    assert pacer.waited["replica_lag"] == pytest.approx(7.0)


def test_paused_run_without_budget_gives_up_after_max_pause() -> None:
    clock = FakeClock()
    primary = Primary(clock)
    primary.paused_at = clock.now
    clock.now += 60.0
    pacer = make_pacer(clock, primary.sample, lag=10.0)
    feed(pacer, primary)
    assert pacer(0.05, None) == "replica_lag"
    assert pacer.waited["replica_lag"] == pytest.approx(MAX_PAUSE_SECONDS)


def test_stop_ends_a_pause_at_once() -> None:
    clock = FakeClock()
    clock.stop_after = 2
    primary = Primary(clock)
    primary.paused_at = clock.now
    clock.now += 60.0
    pacer = make_pacer(clock, primary.sample, lag=10.0)
    feed(pacer, primary)
    assert pacer(0.05, None) is None  # the runner then sees the stop
    assert len(clock.waits) == 2


def test_replay_lag_column_counts_even_without_history() -> None:
    clock = FakeClock()
    primary = Primary(clock)
    primary.replay_lag = 25.0  # a slow standby, reported by the server
    pacer = make_pacer(clock, primary.sample, lag=10.0)
    assert pacer(0.05, clock.now + 3.0) == "replica_lag"


def test_replica_pacing_off() -> None:
    clock = FakeClock()
    primary = Primary(clock)
    primary.replay_lag = 25.0
    pacer = make_pacer(clock, primary.sample, lag=None)
    assert pacer(0.05, None) is None
    assert clock.waits == []


def test_invisible_standby_is_told_once_and_never_paused_for(
    capsys: pytest.CaptureFixture[str],
) -> None:
    clock = FakeClock()
    primary = Primary(clock)
    primary.visible = False
    primary.replay_lag = 99.0
    pacer = make_pacer(clock, primary.sample, lag=10.0)
    told: list[str] = []
    pacer._once = lambda event, **fields: told.append(event)  # type: ignore[method-assign]
    for _ in range(3):
        assert pacer(0.05, None) is None
        clock.now += 1.0  # a new sample each time
    assert clock.waits == []
    assert told.count("replica_lag_unknown") == 3  # routed through _once, which dedups
    real = Pacer(primary.sample, max_replica_lag=10.0, busy_share=1.0, clock=clock, wait=clock.wait)
    for _ in range(3):
        real(0.05, None)
    assert real._told == {"replica_lag_unknown"}


def test_a_failed_measurement_never_fails_the_run() -> None:
    clock = FakeClock()

    def broken() -> Sample:
        raise RuntimeError("canceling statement due to statement timeout")

    pacer = make_pacer(clock, broken, lag=10.0, share=0.5)
    assert pacer(0.05, None) is None
    assert clock.waits == []


def test_history_dates_bytes_behind() -> None:
    h = WalHistory()
    for i in range(10):
        h.record(100.0 + i, i * 1000)
    assert h.age(9000, 120.0) == 0.0  # caught up
    assert h.age(4500, 120.0) == pytest.approx(15.5)  # written between t=104 and t=105
    assert h.age(4000, 120.0) == pytest.approx(16.0)  # WAL just after 4000: at t=104
    assert h.age(-1, 120.0) == pytest.approx(20.0)  # older than the records: a lower bound
    h.record(200.0, 10)  # the position went back: another server, start again
    assert h.age(5, 210.0) == pytest.approx(10.0)
    h.record(300.0, 1010)  # 100 s later: not interpolated, dated at the later record
    assert h.age(500, 310.0) == pytest.approx(10.0)
    small = WalHistory(length=3)
    for i in range(10):
        small.record(float(i), i)
    assert small.age(0, 10.0) == pytest.approx(3.0)  # only the last 3 kept (t=7, 8, 9)


def test_standby_lag_takes_the_larger_signal() -> None:
    h = WalHistory()
    h.record(0.0, 0)
    h.record(1.0, 100)
    assert standby_lag(Standby("s", True, 50, 0.2), h, 5.0) == pytest.approx(4.5)
    assert standby_lag(Standby("s", True, 100, 0.2), h, 5.0) == pytest.approx(0.2)
    assert standby_lag(Standby("s", True, None, None), h, 5.0) == 0.0
    assert standby_lag(Standby("s", False, None, None), h, 5.0) is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_replica_lag": "10"}, "--max-replica-lag: "),  # a duration needs its unit
        ({"max_replica_lag": "-1s"}, "--max-replica-lag: must be positive"),
        ({"max_replica_lag": "soon"}, "--max-replica-lag: "),
        ({"busy_share": "0"}, "--busy-share: must be more than 0 and at most 1"),
        ({"busy_share": "1.5"}, "--busy-share: must be more than 0 and at most 1"),
        ({"busy_share": True}, "--busy-share: "),
        ({"busy_share": "half"}, "--busy-share: "),
    ],
)
def test_pacing_settings_refuse_bad_values(values: dict[str, object], message: str) -> None:
    from reaper.config.settings import build_settings
    from reaper.errors import ConfigError

    with pytest.raises(ConfigError) as exc:
        build_settings(values)
    assert str(exc.value).startswith(message)
    assert "\n" not in str(exc.value)


def test_pacing_settings_defaults_and_off() -> None:
    from datetime import timedelta

    from reaper.config.settings import build_settings

    s = build_settings({})
    assert s.max_replica_lag == timedelta(seconds=10) and s.busy_share == 0.75
    off = build_settings({"max_replica_lag": "0", "busy_share": "1"})
    assert off.max_replica_lag is None and off.busy_share == 1.0
    assert build_settings(
        {}, {"max-replica-lag": "2m", "busy_share": 0.25}
    ).max_replica_lag == timedelta(minutes=2)


def test_throttled_seconds_start_at_zero_for_every_sweep_and_reason() -> None:
    from prometheus_client import CollectorRegistry

    from reaper.metrics import Metrics
    from tests.support import BUILTIN_SWEEPS

    registry = CollectorRegistry()
    metrics = Metrics(BUILTIN_SWEEPS, registry)
    for sweep in BUILTIN_SWEEPS:
        for reason in ("replica_lag", "load"):
            assert (
                registry.get_sample_value(
                    "reaper_throttled_seconds_total", {"sweep": sweep.name, "reason": reason}
                )
                == 0.0
            )
    metrics.throttled("nodes_silent", "load", 0.25)
    assert (
        registry.get_sample_value(
            "reaper_throttled_seconds_total", {"sweep": "nodes_silent", "reason": "load"}
        )
        == 0.25
    )


def test_busy_is_what_the_last_sample_saw_when_load_pacing_is_on() -> None:
    clock = FakeClock()
    primary = Primary(clock)
    primary.busy = 2
    pacer = make_pacer(clock, primary.sample, share=0.5)
    pacer(None, None)
    assert pacer.busy
    primary.busy = 0
    clock.now += 1.0
    pacer(None, None)
    assert not pacer.busy
    off = make_pacer(clock, primary.sample, share=1.0)
    primary.busy = 2
    off(None, None)
    assert not off.busy  # --busy-share 1: batches are never shortened either

"""The load pacer's feedback controller and the WAL brake (reaper.engine.pacing), driven with a
fake clock and a fake server whose live statements suffer from long batches: no database, no
sleeping."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry

from reaper.config.settings import build_settings
from reaper.db import Sample
from reaper.engine.load import (
    BASELINE_EVERY_SECONDS,
    BASELINE_HOLD_SECONDS,
    BASELINE_MIN,
    BASELINE_RETRIES,
    GROWTH_STEPS,
    JUDGED_POOLS,
    JUDGED_STATEMENTS,
    MIN_SHARE_FRACTION,
    LoadControl,
)
from reaper.engine.pacing import Memory, Pacer
from reaper.engine.walbrake import MAX_WAL_DEBT_SECONDS, WAL_BURST_SECONDS, WalBrake
from reaper.metrics import Metrics
from tests.unit.engine.test_pacing import FakeClock

MS = 0.001


def judge(c: LoadControl, latency: float) -> bool | None:
    """One pool of JUDGED_STATEMENTS statements, each of ``latency`` seconds."""
    for _ in range(JUDGED_STATEMENTS - 1):
        assert c.observe([latency]) is None  # the pool fills
    return c.observe([latency])


def test_no_baseline_no_decision() -> None:
    c = LoadControl(0.002, 0.05, 0.5)
    assert c.observe([0.5] * 100) is None
    assert (c.aim, c.share) == (0.002, 0.5)
    c.unexposed([MS])
    assert c.observe([]) is None
    assert (c.aim, c.share) == (0.002, 0.5)


def test_unharmed_traffic_grows_the_aim_to_the_ceiling_and_keeps_the_share_cap() -> None:
    c = LoadControl(0.002, 0.05, 0.5)
    c.unexposed([MS] * 20)
    aims = []
    for _ in range(6):
        assert judge(c, 1.2 * MS) is False
        aims.append(c.aim)
    # A slow start: doubling until the traffic first suffers, up to the ceiling.
    assert aims == pytest.approx([0.004, 0.008, 0.016, 0.032, 0.05, 0.05])
    assert c.share == 0.5  # never above --busy-share


def test_suffering_traffic_halves_the_aim_and_the_share_down_to_their_floors() -> None:
    c = LoadControl(0.002, 0.05, 0.5)
    c.unexposed([MS])
    c.aim = 0.05
    # Harm is judged on JUDGED_POOLS pools, from the run's start as after a halving.
    assert [judge(c, 3 * MS) for _ in range(JUDGED_POOLS)] == [None, None, True]
    assert (c.aim, c.share) == (pytest.approx(0.025), 0.25)
    assert c.wait_after(0.01) == pytest.approx(0.03)  # 0.01 x (1 - 0.25) / 0.25
    # After a halving, the next decision waits for JUDGED_POOLS pools judged at the new aim:
    # the pools that decided it do not halve it again.
    for _ in range(10):
        assert [judge(c, 5 * MS) for _ in range(JUDGED_POOLS)] == [None, None, True]
    assert c.aim == 0.002 and c.share == 0.5 * MIN_SHARE_FRACTION
    assert c.harmed == 11
    # After the slow start ended, growth is additive: 1/GROWTH_STEPS of the way per pool.
    assert [judge(c, 0.5 * MS) for _ in range(4)] == [None, None, False, False]
    assert c.aim == pytest.approx(0.002 + 2 * 0.048 / GROWTH_STEPS)


def test_one_bad_spell_halves_the_aim_once() -> None:
    c = LoadControl(0.002, 0.05, 0.5)
    c.unexposed([MS])
    for _ in range(5):
        judge(c, MS)  # a slow start to the ceiling
    assert c.aim == 0.05
    # Three slow pools in a row: the third makes the median of three slow, and halves; the
    # two slow ones before it are not counted again at the halved aim.
    assert [judge(c, 5 * MS) for _ in range(3)] == [False, True, None]
    assert c.aim == pytest.approx(0.025) and c.harmed == 1
    assert [judge(c, MS) for _ in range(2)] == [None, False]
    assert c.aim == pytest.approx(0.025 + 0.048 / GROWTH_STEPS)


def test_harm_is_half_again_the_baseline_and_more_than_noise() -> None:
    for seen, harmed in ((1.4 * MS, False), (1.6 * MS, True)):
        c = LoadControl(0.002, 0.05, 0.5)
        c.unexposed([MS] * 5)
        assert [judge(c, seen) for _ in range(JUDGED_POOLS)][-1] is harmed
    tiny = LoadControl(0.002, 0.05, 0.5)
    tiny.unexposed([0.1 * MS])
    assert judge(tiny, 0.4 * MS) is False  # 4x, but 0.3 ms: noise


def test_one_slow_pool_does_not_halve_the_batches() -> None:
    c = LoadControl(0.002, 0.05, 0.5)
    c.unexposed([MS] * 20)
    judge(c, MS)
    judge(c, MS)
    aim = c.aim
    assert judge(c, 50 * MS) is False  # a stall of the machine, alone among its neighbours
    assert c.aim > aim
    before = c.aim
    assert judge(c, 50 * MS) is True  # twice in three pools: the traffic suffers
    assert c.aim == before / 2


@dataclass
class Server:
    """A fake server: ``sessions`` live clients, each of whose last statement ended 1 ms before
    the sample and took ``base`` seconds, times (1 + the aim of a batch that ran during it /
    ``harm_aim``): batches longer than ``harm_aim`` / 2 make it suffer. WAL grows by
    ``wal_per_second`` of batch time."""

    clock: FakeClock
    sessions: int = 4
    base: float = MS
    harm_aim: float | None = 0.01
    wal_per_second: float = 0.0
    wal: int = 0
    # (start, end, seconds aimed at) of each batch.
    batches: list[tuple[float, float, float]] = field(default_factory=list)
    samples: int = 0

    def took(self, end: float) -> float:
        took = self.base
        for start, stop, aim in self.batches[-3:]:
            if self.harm_aim is not None and start < end and stop > end - took:
                took = self.base * (1 + aim / self.harm_aim)
        return took

    def sample(self) -> Sample:
        self.samples += 1
        ended = self.clock.now - MS
        took = self.took(ended)
        return Sample(
            wal_lsn=self.wal,
            busy_sessions=self.sessions,
            statements=tuple((took, MS) for _ in range(self.sessions)),
        )

    def batch(self, seconds: float, aim: float) -> None:
        start = self.clock.now
        self.clock.now += seconds
        self.wal += int(seconds * self.wal_per_second)
        self.batches.append((start, self.clock.now, aim))


def drive(
    pacer: Pacer,
    server: Server,
    seconds: float,
    *,
    deadline: float | None = None,
    batch: float | None = None,
) -> list[float]:
    """Batches of the pacer's aim while busy (else ``batch`` or 50 ms) for ``seconds`` of
    the fake clock; returns the aim of each."""
    aims = []
    last: float | None = None
    end = server.clock.now + seconds
    while server.clock.now < end:
        assert pacer(last, deadline) is None
        aim = batch or (pacer.aim if pacer.busy else 0.05)
        server.batch(aim, aim)
        aims.append(aim)
        last = aim
    return aims


def make(clock: FakeClock, server: Server, **kw: object) -> tuple[Pacer, list[tuple[str, float]]]:
    got: list[tuple[str, float]] = []
    pacer = Pacer(
        server.sample,
        max_replica_lag=None,
        clock=clock,
        wait=clock.wait,
        throttled=lambda reason, s: got.append((reason, s)),
        **{"busy_share": 0.5, "busy_batch_seconds": 0.002, "batch_target_seconds": 0.05, **kw},
    )  # type: ignore[arg-type]
    return pacer, got


def test_unharmed_traffic_lets_batches_grow_to_the_target() -> None:
    clock = FakeClock()
    server = Server(clock, harm_aim=None)
    pacer, _ = make(clock, server)
    aims = drive(pacer, server, 10.0)
    assert aims[0] == 0.002  # the strictest aim first
    assert aims[-1] == pytest.approx(0.05)
    assert pacer.control.harmed == 0 and pacer.control.unharmed >= 5


def test_batches_settle_below_what_makes_traffic_suffer() -> None:
    """Statements suffer (1.5x their baseline) beside batches of more than 5 ms: the aim
    saws around that, never far above it, and well above the floor on average."""
    clock = FakeClock()
    server = Server(clock, harm_aim=0.01)
    pacer, _ = make(clock, server)
    aims = drive(pacer, server, 30.0)
    later = aims[len(aims) // 4 :]
    assert pacer.control.harmed > 5 and pacer.control.unharmed > 5
    assert max(later) <= 0.005 + 3 * 0.048 / GROWTH_STEPS + 1e-9  # a few steps past it
    assert statistics.mean(later) > 0.003  # not stuck at the 2 ms floor


def test_the_baseline_comes_from_statements_that_ran_without_a_batch() -> None:
    clock = FakeClock()
    server = Server(clock, harm_aim=0.002)  # every batch hurts
    pacer, got = make(clock, server)
    drive(pacer, server, 1.0)
    # From before the first batch: 1 ms, not the harmed latencies seen later.
    assert pacer.control.baseline == pytest.approx(MS)
    assert pacer.control.harmed > 0 and pacer.control.unharmed == 0
    # Measured again every BASELINE_EVERY_SECONDS: the run holds still BASELINE_HOLD_SECONDS
    # after a batch (the load wait counts toward it); the statements that ran meanwhile are
    # unharmed.
    server.base = 2 * MS  # the traffic became slower on its own
    drive(pacer, server, BASELINE_EVERY_SECONDS + 1.0)
    # Four new latencies beside the four of before, the slowest of them its 95th percentile.
    assert pacer.control.baseline == pytest.approx(2 * MS)
    holds = [s for reason, s in got if reason == "load" and s >= BASELINE_HOLD_SECONDS / 2]
    assert holds


def test_traffic_that_comes_back_starts_from_the_strictest_aim() -> None:
    clock = FakeClock()
    server = Server(clock, harm_aim=None)
    pacer, _ = make(clock, server)
    drive(pacer, server, 10.0)
    assert pacer.aim == pytest.approx(0.05)
    server.sessions = 0
    drive(pacer, server, 2.0)
    assert not pacer.busy
    server.sessions = 4
    aims = drive(pacer, server, 1.5)
    assert 0.002 in aims  # back to --busy-batch-seconds, then growing again
    assert pacer.control.baseline == pytest.approx(MS)


def test_quiet_database_is_not_sampled_more_often_nor_held() -> None:
    clock = FakeClock()
    server = Server(clock, sessions=0)
    pacer, got = make(clock, server)
    drive(pacer, server, 10.0)
    assert 9 <= server.samples <= 11
    assert got == []


def test_wal_brake_keeps_the_servers_wal_within_the_limit() -> None:
    clock = FakeClock()
    server = Server(clock, sessions=0, wal_per_second=50e6)  # 50 MB/s unbraked
    pacer, got = make(clock, server, brake=WalBrake(10e6, clock.now))
    start, wal0 = clock.now, server.wal
    drive(pacer, server, 20.0, batch=0.05)
    elapsed = clock.now - start
    assert server.wal - wal0 <= 10e6 * (elapsed + WAL_BURST_SECONDS) + 50e6 * 0.1
    assert server.wal - wal0 >= 10e6 * elapsed * 0.8  # and no slower than it need be
    waited = sum(s for reason, s in got if reason == "wal")
    assert waited == pytest.approx(pacer.waited["wal"]) and waited > 10.0
    assert all(reason == "wal" for reason, _ in got)


def test_wal_brake_never_outlasts_the_budget_and_off_never_waits() -> None:
    clock = FakeClock()
    server = Server(clock, sessions=0, wal_per_second=50e6)
    pacer, _ = make(clock, server, brake=WalBrake(1e6, clock.now))
    deadline = clock.now + 3.0
    drive(pacer, server, 2.9, deadline=deadline, batch=0.05)
    assert clock.now <= deadline + 0.05 + 1e-9
    clock2 = FakeClock()
    server2 = Server(clock2, sessions=0, wal_per_second=50e6)
    off, got = make(clock2, server2)
    drive(off, server2, 5.0, batch=0.05)
    assert got == [] and off.brake is None


def test_runs_on_one_database_share_one_wal_bucket() -> None:
    """Seven short runs one after the other (a run-once) write at the limit, not at the limit
    plus a burst each; a new rate (a reload) starts a new bucket."""
    clock = FakeClock()
    server = Server(clock, sessions=0, wal_per_second=50e6)
    memory = Memory()
    start, wal0 = clock.now, server.wal
    for _ in range(7):
        pacer, _ = make(clock, server, brake=memory.brake(10e6, clock.now))
        drive(pacer, server, 0.5, batch=0.05)
    elapsed = clock.now - start
    assert server.wal - wal0 <= 10e6 * (elapsed + WAL_BURST_SECONDS) + 50e6 * 0.1
    assert memory.brake(10e6, clock.now) is memory.brake(10e6, clock.now)
    assert memory.brake(20e6, clock.now).rate == 20e6


def test_batches_that_wrote_nothing_never_stand_for_those_that_delete() -> None:
    """Empty heap ranges first (no WAL), then batches that delete: at 1 kB/s the brake reads
    the position again before each batch until one that wrote WAL is measured, so at most one
    such batch runs before the first wait."""
    clock = FakeClock()
    server = Server(clock, sessions=0)
    pacer, got = make(clock, server, brake=WalBrake(1e3, clock.now))
    batches: list[int] = []
    for i in range(20):
        assert pacer(0.005 if i else None, None) is None
        if got:
            break
        server.wal_per_second = 0.0 if i < 3 else 70e6  # 350 kB per 5 ms batch
        before = server.wal
        server.batch(0.005, 0.005)
        batches.append(server.wal - before)
    assert got and got[0][0] == "wal"
    assert batches[:3] == [0, 0, 0] and len([b for b in batches if b]) == 1


def test_wal_brake_bucket() -> None:
    b = WalBrake(1e6, now=0.0)
    b.written(0, 0.0)
    assert b.owed(0.0) == 0.0
    b.written(3_000_000, 0.5)  # 3 MB in half a second against a full bucket of 1 MB
    assert b.owed(0.5) == pytest.approx(2.0)
    assert b.owed(1.5) == pytest.approx(1.0)
    assert b.owed(2.5) == 0.0
    b.written(10**12, 3.0)  # someone else wrote a terabyte: the debt is capped
    assert b.owed(3.0) == pytest.approx(MAX_WAL_DEBT_SECONDS)
    b.written(10, 4.0)  # another server behind the address (a failover): no debt from it
    assert b.owed(4.0) == pytest.approx(MAX_WAL_DEBT_SECONDS - 1.0)


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("16MB", 16_000_000),
        ("16MiB", 16 * 1024**2),
        ("16MB/s", 16_000_000),
        ("500kB", 500_000),
        (1_000_000, 1_000_000),
        ("0", None),
        (0, None),
    ],
)
def test_max_wal_rate_setting(text: object, rate: int | None) -> None:
    assert build_settings({"max_wal_rate": text}).max_wal_rate == rate
    assert build_settings({}).max_wal_rate is None  # off by default


def test_throttled_seconds_for_the_wal_brake_start_at_zero() -> None:
    from tests.support import BUILTIN_SWEEPS

    registry = CollectorRegistry()
    Metrics(BUILTIN_SWEEPS, registry)
    for sweep in BUILTIN_SWEEPS:
        assert (
            registry.get_sample_value(
                "reaper_throttled_seconds_total", {"sweep": sweep.name, "reason": "wal"}
            )
            == 0.0
        )


def test_wal_owed_to_the_brake_takes_a_parallel_walks_extra_connections_away() -> None:
    clock = FakeClock()
    server = Server(clock, sessions=0)
    pacer, _ = make(clock, server, brake=WalBrake(10e6, clock.now))
    assert pacer(None, None) is None
    assert pacer.idle()  # nothing written beyond the burst
    assert pacer.brake is not None
    pacer.brake.written(int(100e6), clock.now)  # ten seconds' worth, by a bulk load elsewhere
    assert not pacer.idle()
    clock.now += 10.0
    assert pacer.idle()  # paid back


def test_a_short_baseline_is_measured_again_a_few_times_a_run_not_before_every_batch() -> None:
    # One client: each sample and each hold sees one statement, never BASELINE_MIN.
    clock = FakeClock()
    server = Server(clock, sessions=1)
    pacer, _ = make(clock, server)
    drive(pacer, server, 5.0)
    assert len(pacer.control._baseline) == 1 + BASELINE_RETRIES < BASELINE_MIN
    # Six clients: the first sample and the holds fill it.
    clock = FakeClock()
    server = Server(clock, sessions=6)
    pacer, _ = make(clock, server)
    drive(pacer, server, 5.0)
    assert len(pacer.control._baseline) >= BASELINE_MIN


def test_the_brake_reads_the_wal_again_before_a_batch_its_credit_may_not_cover() -> None:
    b = WalBrake(1e6, now=0.0)
    b.written(0, 0.0)
    assert not b.covers(1, 0.0)  # a batch's WAL is not known yet: read the position again
    b.written(100_000, 0.001, batches=1)  # 100 kB a batch
    assert b.covers(9, 0.001)  # 900 kB in 9 batches: what is left
    assert not b.covers(10, 0.001)

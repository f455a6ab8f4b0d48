"""The clock check's decisions, without a database: the database clock against reaper's host
clock and against its own last reading (reaper/engine/clock.py), and the engine's one
chokepoint (Sweeper.run) driven through a stand-in database whose clock a test moves.
The server's clock itself is moved under libfaketime in tests/test_safety_clock.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from reaper.config.engine import engine_options
from reaper.config.settings import DEFAULT_MAX_CLOCK_SKEW, Settings, build_settings
from reaper.config.sweeps import Sweep, by_name, configured_sweeps
from reaper.engine.clock import ClockHistory, ClockReading, judge_clock, read_clock
from reaper.engine.run import RunRequest, Sweeper
from reaper.metrics import Metrics
from reaper.vocab import ClockCheck, Outcome

HOST = datetime(2026, 6, 2, 12, 0, tzinfo=UTC)
BOUND = timedelta(minutes=5)
DAY = 86_400.0


def reading(
    db_ahead: float, *, mono: float = 1000.0, round_trip: float = 0.0, host: datetime = HOST
) -> ClockReading:
    """A reading whose database clock is ``db_ahead`` seconds ahead of the host's."""
    return ClockReading(host + timedelta(seconds=db_ahead), host, mono, round_trip)


# --- the host clock ------------------------------------------------------------------------


@pytest.mark.parametrize("skew", [0.0, 1.0, 299.0, 300.0, -299.0, -300.0])
def test_a_skew_up_to_the_bound_either_way_goes_on(skew: float) -> None:
    verdict = judge_clock("nodes_silent", reading(skew), None, BOUND)
    assert verdict.refused_by is None and verdict.message is None
    assert verdict.host_skew == skew


def test_a_database_clock_60_days_ahead_is_refused_naming_both_clocks() -> None:
    verdict = judge_clock("nodes_silent", reading(60 * DAY), None, BOUND)
    assert verdict.refused_by == ClockCheck.HOST
    assert verdict.message == (
        "sweep nodes_silent: the database clock (2026-08-01T12:00:00Z) is 60d ahead of "
        "reaper's host clock (2026-06-02T12:00:00Z), more than max_clock_skew 5m; nothing was "
        "deleted. Fix the clock that is wrong, or set max_clock_skew = 0 (--max-clock-skew / "
        "REAPER_MAX_CLOCK_SKEW) to override"
    )
    assert "\n" not in verdict.message


@pytest.mark.parametrize("skew", [301.0, 3600.0, 60 * DAY])
def test_just_over_the_bound_ahead_is_refused(skew: float) -> None:
    assert judge_clock("s", reading(skew), None, BOUND).refused_by == ClockCheck.HOST


@pytest.mark.parametrize("skew", [-301.0, -60 * DAY])
def test_a_database_clock_behind_the_host_is_refused_too(skew: float) -> None:
    verdict = judge_clock("s", reading(skew), None, BOUND)
    assert verdict.refused_by == ClockCheck.HOST
    assert verdict.message is not None and " behind reaper's host clock " in verdict.message


def test_the_query_round_trip_widens_the_bound() -> None:
    # The host was read before and after now(): now() is somewhere in between.
    assert judge_clock("s", reading(302.0, round_trip=3.0), None, BOUND).refused_by is None
    assert judge_clock("s", reading(304.0, round_trip=3.0), None, BOUND).refused_by is not None


def test_max_clock_skew_0_turns_the_check_off_but_still_measures() -> None:
    verdict = judge_clock("s", reading(60 * DAY), reading(0.0, mono=0.0), None)
    assert verdict.refused_by is None
    assert verdict.host_skew == 60 * DAY
    assert verdict.history_skew == pytest.approx(60 * DAY - 1000.0)


def test_the_default_bound_is_a_few_minutes() -> None:
    assert timedelta(minutes=1) <= DEFAULT_MAX_CLOCK_SKEW <= timedelta(minutes=10)
    assert build_settings({}).max_clock_skew == DEFAULT_MAX_CLOCK_SKEW
    assert build_settings({"max_clock_skew": "0"}).max_clock_skew is None
    assert build_settings({"max_clock_skew": "90s"}).max_clock_skew == timedelta(seconds=90)


# --- the database clock's history ----------------------------------------------------------


def test_no_earlier_reading_no_history_check() -> None:
    verdict = judge_clock("s", reading(0.0), None, BOUND)
    assert verdict.history_skew is None and verdict.refused_by is None


def test_both_clocks_jumping_together_are_caught_by_the_monotonic_clock() -> None:
    """One VM: the host clock and the database clock step 60 days together; the monotonic
    clock does not step."""
    last = reading(0.0, mono=1000.0)
    later = reading(0.0, mono=1000.0 + 3600, host=HOST + timedelta(days=60, hours=1))
    verdict = judge_clock("nodes_silent", later, last, BOUND)
    assert verdict.refused_by == ClockCheck.HISTORY
    assert verdict.history_skew == pytest.approx(60 * DAY)
    assert verdict.message is not None
    assert verdict.message.startswith(
        "sweep nodes_silent: the database clock (2026-08-01T13:00:00Z) jumped 60d ahead since "
        "reaper last read it (2026-06-02T12:00:00Z, 1h ago by reaper's monotonic clock)"
    )
    assert "restart reaper" in verdict.message and "max_clock_skew = 0" in verdict.message


@pytest.mark.parametrize(
    ("drift", "refused"),
    [
        (0.0, False),
        (299.0, False),
        (300.0, False),
        (301.0, True),
        (-3600.0, False),
        (-60 * DAY, False),
    ],
)
def test_history_refuses_only_a_jump_ahead_past_the_bound(drift: float, refused: bool) -> None:
    """A database clock going back makes cutoffs earlier: a run deletes less, not more."""
    last = reading(0.0, mono=1000.0)
    later = ClockReading(
        HOST + timedelta(seconds=600 + drift), HOST + timedelta(seconds=600), 1600.0
    )
    # The host clock moved with the database's here, so only the history can refuse.
    later = ClockReading(later.database, later.database, later.monotonic)
    verdict = judge_clock("s", later, last, BOUND)
    assert verdict.history_skew == pytest.approx(drift)
    assert (verdict.refused_by == ClockCheck.HISTORY) is refused


def test_the_history_keeps_the_latest_reading() -> None:
    history = ClockHistory()
    assert history.last is None
    history.record(reading(0.0, mono=10.0))
    history.record(reading(5.0, mono=5.0))  # a parallel run's earlier reading, recorded late
    assert history.last is not None and history.last.monotonic == 10.0


def test_read_clock_takes_the_host_clocks_around_the_database_reading() -> None:
    walls = iter([HOST.timestamp(), HOST.timestamp() + 2.0])
    monos = iter([100.0, 102.0])
    got = read_clock(lambda: HOST + timedelta(days=60), lambda: next(walls), lambda: next(monos))
    assert got.host == HOST + timedelta(seconds=1)
    assert got.monotonic == 101.0 and got.round_trip == 2.0
    assert got.host_skew == pytest.approx(60 * DAY - 1.0)


# --- the chokepoint: Sweeper.run -----------------------------------------------------------


class _Reached(Exception):
    """The run got past the clock check (the stand-in goes no further)."""


class _Statements:
    """A sweep's statements as far as the stand-in goes: any use of them is past the check."""

    def __getattr__(self, name: str) -> Any:
        raise _Reached


class _Session:
    def __init__(self, db: _Database) -> None:
        self._db = db

    def try_advisory_locks(self, keys: Any) -> bool:
        return True

    def release_advisory_locks(self) -> None:
        pass

    def now(self, pinned: datetime | None = None) -> datetime:
        return pinned or self._db.clock

    def check_predicate(self, *args: Any, **kwargs: Any) -> Any:
        return object()

    def statements(self, checked: Any, keep: Any = None) -> _Statements:
        return _Statements()

    def __getattr__(self, name: str) -> Any:
        self._db.touched.append(name)
        raise _Reached


class _Database:
    """What Sweeper.run asks of a Database before its first statement past the cutoffs."""

    def __init__(self, clock: datetime) -> None:
        self.clock = clock
        self.touched: list[str] = []

    @contextlib.contextmanager
    def session(self, *, read_only: bool = False, since: float | None = None) -> Iterator[_Session]:
        yield _Session(self)

    def helper_session(self) -> contextlib.AbstractContextManager[_Session]:
        return self.session()


class _HostClock:
    def __init__(self, at: datetime) -> None:
        self.wall, self.mono = at.timestamp(), 5000.0

    def advance(self, seconds: float, *, wall: float | None = None) -> None:
        self.mono += seconds
        self.wall += seconds if wall is None else wall


def _settings(**values: Any) -> Settings:
    return build_settings({"dsn": "postgresql://reaper@127.0.0.1/reaper", **values})


def _sweep(settings: Settings) -> Sweep:
    return by_name(configured_sweeps(settings))["nodes_silent"]


def _sweeper(host: _HostClock) -> Sweeper:
    return Sweeper(wall=lambda: host.wall, monotonic=lambda: host.mono)


def _metrics(sweep: Sweep) -> Metrics:
    return Metrics([sweep], CollectorRegistry())


def _refusals(metrics: Metrics, clock: ClockCheck) -> float | None:
    return metrics.registry.get_sample_value(
        "reaper_clock_refusals_total", {"sweep": "nodes_silent", "clock": clock}
    )


def test_a_run_whose_database_clock_is_ahead_fails_before_any_statement() -> None:
    settings = _settings()
    sweep, host = _sweep(settings), _HostClock(HOST)
    db = _Database(HOST + timedelta(days=60))
    metrics = _metrics(sweep)
    result = _sweeper(host).run(cast(Any, db), sweep, engine_options(settings), metrics=metrics)
    assert result.outcome == Outcome.REFUSED
    assert result.error_type == "ClockSkewRefused"
    assert result.error is not None and "is 60d ahead of reaper's host clock" in result.error
    assert result.rows == 0 and db.touched == []
    assert _refusals(metrics, ClockCheck.HOST) == 1.0
    assert _refusals(metrics, ClockCheck.HISTORY) == 0.0
    assert metrics.registry.get_sample_value("reaper_clock_skew_seconds") == 60 * DAY
    assert (
        metrics.registry.get_sample_value(
            "reaper_sweep_runs_total", {"sweep": "nodes_silent", "outcome": "refused"}
        )
        == 1.0
    )


def test_a_dry_run_reports_the_refusal_a_real_run_would_meet_and_counts_nothing() -> None:
    settings = _settings()
    sweep, host = _sweep(settings), _HostClock(HOST)
    db = _Database(HOST + timedelta(days=60))
    metrics = _metrics(sweep)
    result = _sweeper(host).run(
        cast(Any, db),
        sweep,
        engine_options(settings),
        RunRequest(dry_run=True, lock=False),
        metrics=metrics,
    )
    assert result.outcome == Outcome.SUCCESS and result.error is None
    assert result.refusal is not None
    assert "is 60d ahead of reaper's host clock" in result.refusal
    assert result.rows == 0 and db.touched == []
    assert _refusals(metrics, ClockCheck.HOST) == 0.0


def test_a_clock_within_the_bound_goes_on_past_the_check() -> None:
    settings = _settings()
    sweep, host = _sweep(settings), _HostClock(HOST)
    db = _Database(HOST + timedelta(minutes=4))
    metrics = _metrics(sweep)
    result = _sweeper(host).run(cast(Any, db), sweep, engine_options(settings), metrics=metrics)
    assert result.error_type == "_Reached"
    assert _refusals(metrics, ClockCheck.HOST) == 0.0
    assert metrics.registry.get_sample_value("reaper_clock_skew_seconds") == 240.0


def test_opting_out_lets_a_skewed_clock_through() -> None:
    settings = _settings(max_clock_skew="0")
    sweep, host = _sweep(settings), _HostClock(HOST)
    result = _sweeper(host).run(
        cast(Any, _Database(HOST + timedelta(days=60))), sweep, engine_options(settings)
    )
    assert result.error_type == "_Reached"


def test_the_daemon_refuses_a_jump_of_both_clocks_by_its_earlier_reading() -> None:
    """One process (the daemon's Sweeper): a first run reads a sound clock; an hour later the
    host's and the database's wall clocks have both stepped 60 days ahead."""
    settings = _settings()
    sweep, host = _sweep(settings), _HostClock(HOST)
    db = _Database(HOST)
    sweeper, metrics = _sweeper(host), _metrics(sweep)
    assert (
        sweeper.run(cast(Any, db), sweep, engine_options(settings), metrics=metrics).error_type
        == "_Reached"
    )
    host.advance(3600, wall=60 * DAY + 3600)
    db.clock = HOST + timedelta(days=60, hours=1)
    result = sweeper.run(cast(Any, db), sweep, engine_options(settings), metrics=metrics)
    assert result.error_type == "ClockSkewRefused"
    assert result.error is not None and "jumped 60d ahead since reaper last read it" in result.error
    assert _refusals(metrics, ClockCheck.HISTORY) == 1.0
    # The clock comes back: the next run goes on.
    host.advance(60, wall=-60 * DAY + 60)
    db.clock = HOST + timedelta(hours=1, minutes=1)
    assert (
        sweeper.run(cast(Any, db), sweep, engine_options(settings), metrics=metrics).error_type
        == "_Reached"
    )


def test_a_pinned_now_is_not_checked() -> None:
    settings = _settings()
    sweep, host = _sweep(settings), _HostClock(HOST)
    result = _sweeper(host).run(
        cast(Any, _Database(HOST)),
        sweep,
        engine_options(settings),
        RunRequest(now=HOST + timedelta(days=60)),
    )
    assert result.error_type == "_Reached"

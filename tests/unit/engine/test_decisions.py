"""The engine's decisions against an in-memory session (tests/unit/engine/fakes.py): no database, no
process, milliseconds. Which row a failing batch skips, heap or index, how a heap walk sizes
its ranges, and when the full-table interlock counts instead of trusting its sample.
PostgreSQL itself is tried by the db tests (test_batch_cost.py, test_engine_strategy.py,
test_safety_interlock.py) for what only it knows."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from reaper.config.engine import engine_options
from reaper.config.settings import Settings, build_settings
from reaper.config.sweeps import Sweep, by_name, configured_sweeps
from reaper.db import KEYSET_START, WalMark
from reaper.db.statements import parse_tid
from reaper.engine.batches import batch_strategy
from reaper.engine.context import Run, RunSpec, RunTools
from reaper.engine.deleter import Deleter
from reaper.engine.interlock import EXACT_MARGIN, EligibleMeasure, TableWindow, judge_table
from reaper.engine.sizing import BatchSizer
from reaper.engine.strategy import choose_strategy
from reaper.errors import ConnectionFailed, FullTableRefused
from reaper.metrics import Metrics
from reaper.vocab import SkipReason, StopReason, Strategy
from tests.unit.engine.fakes import FakeHeap, FakeSession, statements


def _settings(**values: Any) -> Settings:
    return build_settings({"dsn": "postgresql://reaper@127.0.0.1/reaper", **values})


def _sweep(settings: Settings) -> Sweep:
    return by_name(configured_sweeps(settings))["nodes_silent"]


SWEEP: Sweep = _sweep(_settings())


def _run(session: FakeSession, heap: FakeHeap, settings: Settings | None = None) -> Run:
    settings = settings or _settings()
    sweep = _sweep(settings)
    return Run.begin(
        RunSpec(sweep, statements(heap), {}, engine_options(settings)),
        RunTools(session, clock=session.clock),  # type: ignore[arg-type]
        metrics=Metrics([sweep], CollectorRegistry()),
    )


def _sweep_heap(
    run: Run, strategy: Strategy, fraction: float | None = None, batch_size: int = 20_000
) -> StopReason:
    (hs,) = run.spec.statements.heaps
    sizer = BatchSizer(batch_size, run.spec.options.statement_timeout_seconds)
    return batch_strategy(strategy, run.spec.options, fraction).run(Deleter(run, hs, sizer))


def _metric(run: Run, name: str, **labels: str) -> float | None:
    assert run.tally.metrics is not None
    return run.tally.metrics.registry.get_sample_value(name, labels)


# -- a batch that meets a row it cannot delete -------------------------------------------------


@pytest.mark.parametrize("strategy", [Strategy.HEAP, Strategy.INDEX])
def test_a_row_a_foreign_key_keeps_is_isolated_and_only_it_is_skipped(
    strategy: Strategy,
) -> None:
    garbage = [(b, o) for b in range(4) for o in (1, 2, 3)]
    heap = FakeHeap.of("nodes", blocks=4, per_block=5, garbage=garbage, refused={(2, 2)})
    run = _run(FakeSession(), heap)
    assert _sweep_heap(run, strategy, fraction=0.6) == StopReason.DONE
    # Every other garbage row is gone; the refused one and every live row stay.
    assert heap.garbage == [(2, 2)]
    assert len(heap.rows) == 20 - 11
    assert run.result.rows == 11
    assert run.result.skipped == {SkipReason.FOREIGN_KEY: 1}
    table = SWEEP.table
    assert _metric(run, "reaper_skipped_rows_total", table=table, reason="foreign_key") == 1
    assert _metric(run, "reaper_skipped_rows_total", table=table, reason="locked") == 0
    # Deleted rows are counted once durable: at the latest when the run ends.
    assert run.tally.durable is not None and run.tally.durable.count(wait=1.0) == 0
    assert _metric(run, "reaper_deleted_rows_total", table=table, reason=SWEEP.reason) == 11


def test_a_row_a_writer_holds_is_skipped_at_once_when_the_server_names_it() -> None:
    garbage = [(0, o) for o in range(1, 11)]
    heap = FakeHeap.of("nodes", blocks=1, per_block=20, garbage=garbage, held={(0, 4)})
    session = FakeSession()
    run = _run(session, heap)
    assert _sweep_heap(run, Strategy.INDEX) == StopReason.DONE
    assert heap.garbage == [(0, 4)]
    assert run.result.rows == 9
    assert run.result.skipped == {SkipReason.LOCKED: 1}
    assert run.result.contended_batches == 1
    # Not split: the batch was retried whole, without the held row.
    assert session.calls.get("delete_row", 0) == 0
    assert session.calls["delete_index_batch"] == 2


def test_a_row_whose_cascade_meets_a_held_row_is_found_by_splitting() -> None:
    # The server names the held row of the other table, not which row of the batch cascaded
    # into it: the batch is halved until that row fails alone.
    garbage = [(0, o) for o in range(1, 17)]
    heap = FakeHeap.of(
        "nodes", blocks=1, per_block=20, garbage=garbage, held={(0, 9)}, held_in="node_labels"
    )
    session = FakeSession()
    run = _run(session, heap)
    assert _sweep_heap(run, Strategy.INDEX, batch_size=16) == StopReason.DONE
    assert heap.garbage == [(0, 9)]
    assert run.result.rows == 15
    assert run.result.skipped == {SkipReason.LOCKED: 1}
    # Halved down to the one row that fails alone: 16, 8, 4, 2, then one row at a time.
    assert session.calls["delete_row"] >= 1
    assert _metric(run, "reaper_skipped_rows_total", table=SWEEP.table, reason="locked") == 1


# -- the index path's keyset ----------------------------------------------------------------


def test_index_batches_start_where_the_last_one_ended() -> None:
    garbage = [(b, o) for b in range(10) for o in (1, 3, 5)]
    heap = FakeHeap.of("nodes", blocks=10, per_block=6, garbage=garbage)
    session = FakeSession(keyset=True)
    run = _run(session, heap)
    assert _sweep_heap(run, Strategy.INDEX, batch_size=7) == StopReason.DONE
    assert heap.garbage == []
    assert run.result.rows == 30
    # Asked once; the first batch from the start, each next one from the last one's key.
    assert session.calls["keyset_served"] == 1
    assert session.keysets == [KEYSET_START, "(2,1)", "(4,3)", "(6,5)", "(9,1)"]


def test_a_row_isolated_from_a_keyset_batch_is_looked_for_from_the_keyset() -> None:
    garbage = [(b, o) for b in range(4) for o in (1, 2, 3)]
    heap = FakeHeap.of("nodes", blocks=4, per_block=5, garbage=garbage, refused={(2, 2)})
    session = FakeSession(keyset=True)
    run = _run(session, heap)
    assert _sweep_heap(run, Strategy.INDEX, batch_size=4) == StopReason.DONE
    assert heap.garbage == [(2, 2)]
    assert run.result.rows == 11
    assert run.result.skipped == {SkipReason.FOREIGN_KEY: 1}
    # Never back to the front once started: the keys only grow.
    keys = [k for k in session.keysets if k != KEYSET_START]
    assert keys == sorted(keys, key=parse_tid)


def test_without_an_ordered_index_the_batches_keep_no_keyset() -> None:
    garbage = [(b, 1) for b in range(10)]
    heap = FakeHeap.of("nodes", blocks=10, per_block=3, garbage=garbage)
    session = FakeSession(keyset=False)
    run = _run(session, heap)
    assert _sweep_heap(run, Strategy.INDEX, batch_size=4) == StopReason.DONE
    assert heap.garbage == []
    assert session.keysets == [None, None, None]


# -- heap or index -------------------------------------------------------------------------


def _heap_with(fraction_garbage: float, blocks: int = 1000, per_block: int = 10) -> FakeHeap:
    every = round(1 / fraction_garbage) if fraction_garbage else 0
    tids = [(b, o) for b in range(blocks) for o in range(1, per_block + 1)]
    garbage = tids[::every] if every else []
    return FakeHeap.of("nodes", blocks=blocks, per_block=per_block, garbage=garbage)


@pytest.mark.parametrize(
    ("fraction", "expected"),
    [(0.5, Strategy.HEAP), (0.05, Strategy.HEAP), (0.001, Strategy.INDEX)],
)
def test_auto_walks_the_heap_when_much_of_it_is_garbage(
    fraction: float, expected: Strategy
) -> None:
    session = FakeSession()
    run = _run(session, _heap_with(fraction))
    (hs,) = run.spec.statements.heaps
    strategy, measured = choose_strategy(run, hs)
    assert strategy == expected
    assert measured == pytest.approx(fraction, rel=0.05)


def test_auto_walks_the_heap_when_the_index_would_take_many_batches() -> None:
    # 1% garbage, under heap_walk_threshold (2%), of 20,000 rows: 200 rows, more than 10
    # batches of 10, one batch of the default size.
    session = FakeSession()
    run = _run(session, _heap_with(0.01, blocks=2000), _settings(batch_size=10))
    (hs,) = run.spec.statements.heaps
    assert choose_strategy(run, hs)[0] == Strategy.HEAP
    run = _run(session, _heap_with(0.01, blocks=2000))
    (hs,) = run.spec.statements.heaps
    assert choose_strategy(run, hs)[0] == Strategy.INDEX


def test_a_small_table_and_an_old_server_take_the_index_without_a_sample() -> None:
    session = FakeSession()
    run = _run(session, _heap_with(0.5, blocks=64))
    (hs,) = run.spec.statements.heaps
    assert choose_strategy(run, hs) == (Strategy.INDEX, None)
    old = FakeSession(server_version=130_000)
    run = _run(old, _heap_with(0.5))
    (hs,) = run.spec.statements.heaps
    assert choose_strategy(run, hs) == (Strategy.INDEX, None)
    assert "sample_eligible" not in session.calls and "sample_eligible" not in old.calls


def test_a_forced_strategy_wins_over_the_fraction() -> None:
    run = _run(FakeSession(), _heap_with(0.001), _settings(strategy="heap"))
    (hs,) = run.spec.statements.heaps
    assert choose_strategy(run, hs)[0] == Strategy.HEAP


# -- heap-walk ranges ----------------------------------------------------------------------


def test_ranges_shrink_toward_the_time_target_and_the_garbage_all_goes() -> None:
    # 1 ms to scan a block: the first range (capped at 1,024 blocks) takes about a second,
    # 20 times the 50 ms target; each next range at most halves, until a batch takes about
    # the target.
    heap = _heap_with(0.1, blocks=4000)
    heap.block_seconds = 0.001
    session = FakeSession()
    run = _run(session, heap)
    kept = len(heap.rows) - len(heap.garbage)
    assert _sweep_heap(run, Strategy.HEAP, fraction=0.1) == StopReason.DONE
    assert heap.garbage == [] and len(heap.rows) == kept
    spans = [end - first for first, end in session.ranges]
    assert spans[0] == 1024
    assert spans[1:5] == [512, 256, 128, 64]
    target = run.spec.options.batch_target_seconds
    late = run.result.batch_seconds[6:-1]
    assert late and all(target / 2 <= s <= target * 2 for s in late), late


def test_quick_ranges_without_garbage_grow_and_never_shrink() -> None:
    # Live rows only, after a first range sized for dense garbage: quick ranges double.
    heap = FakeHeap.of("nodes", blocks=3000, per_block=10, garbage=[(2999, 1)])
    heap.block_seconds = 0.000_001
    session = FakeSession()
    run = _run(session, heap, _settings(batch_size=80))
    assert _sweep_heap(run, Strategy.HEAP, fraction=1.0, batch_size=80) == StopReason.DONE
    spans = [end - first for first, end in session.ranges]
    assert spans[:4] == [7, 14, 28, 56]
    assert all(b >= a for a, b in itertools.pairwise(spans[:-1]))
    assert run.result.rows == 1


# -- the interlock's margin ----------------------------------------------------------------


def _table(rows: int, garbage: int) -> tuple[FakeSession, Any]:
    heap = FakeHeap.of(
        "nodes",
        blocks=rows // 10,
        per_block=10,
        garbage=[(b, o) for b in range(rows // 10) for o in range(1, 11)][:garbage],
    )
    return FakeSession(), statements(heap)


@pytest.mark.parametrize(
    ("sampled", "true", "counted", "refused"),
    [
        # Clearly under the threshold (0.95 - EXACT_MARGIN): the sample judges, no count.
        (0.80, 0.99, False, False),
        # Within the margin: counted, and the counts decide either way.
        (0.86, 0.96, True, True),
        (0.86, 0.90, True, False),
        (0.97, 0.90, True, False),
    ],
)
def test_a_sample_near_the_threshold_is_judged_again_on_counts(
    sampled: float, true: float, counted: bool, refused: bool
) -> None:
    assert EXACT_MARGIN == 0.1
    session, stmts = _table(10_000, round(10_000 * true))
    measure = EligibleMeasure({}, 10_000.0, 10_000.0 * sampled)
    window = TableWindow(0.0, 10_000.0)

    def judge() -> None:
        judge_table(session, SWEEP, stmts, {}, measure, 0.95, window)  # type: ignore[arg-type]

    if refused:
        with pytest.raises(FullTableRefused, match="counted"):
            judge()
    else:
        judge()
    assert ("count_rows" in session.calls) is counted
    assert ("count_eligible" in session.calls) is counted


def test_the_opt_in_and_a_small_table_are_never_refused() -> None:
    session, stmts = _table(10_000, 10_000)
    everything = EligibleMeasure({}, 10_000.0, 10_000.0)
    judge_table(
        session,
        SWEEP,
        stmts,
        {},
        everything,
        1.0,  # type: ignore[arg-type]
        TableWindow(0.0, 10_000.0),
    )
    assert session.calls == {}  # the opt-in needs no count
    session, stmts = _table(900, 900)
    small = EligibleMeasure({}, 900.0, 900.0)
    judge_table(
        session,
        SWEEP,
        stmts,
        {},
        small,
        0.95,  # type: ignore[arg-type]
        TableWindow(0.0, 900.0),
    )


def test_a_window_refuses_the_run_that_would_finish_the_table() -> None:
    # 950 of 1,900 rows deleted earlier in the window; the 950 left are all eligible.
    session, stmts = _table(950, 950)
    with pytest.raises(FullTableRefused, match="950 rows already deleted"):
        judge_table(
            session,
            SWEEP,
            stmts,
            {},  # type: ignore[arg-type]
            EligibleMeasure({}, 950.0, 950.0),
            0.95,
            TableWindow(0.0, 1900.0, 950),
        )


@pytest.mark.parametrize(
    ("rows", "sampled_rows", "deleted"),
    [
        (0, 0.0, 1900),  # the process emptied the table
        (40, 0.0, 1860),  # a few rows left, none eligible, the heap's sample empty
        (40, 40.0, 1860),  # the sample sees them, none eligible
        (900, 900.0, 1000),  # the window's figures alone would refuse: 47% left, but none go
    ],
)
def test_a_run_with_nothing_to_delete_is_never_refused(
    rows: int, sampled_rows: float, deleted: int
) -> None:
    """Once this process deleted most of a table in the window, a run that counts 0 eligible
    rows goes on (it deletes nothing), however little of the table is left."""
    session, stmts = _table(rows, 0)
    judge_table(
        session,
        SWEEP,
        stmts,
        {},  # type: ignore[arg-type]
        EligibleMeasure({}, sampled_rows, 0.0),
        0.5,
        TableWindow(0.0, 1900.0, deleted),
    )
    assert "count_eligible" in session.calls  # judged on counts, not on the sample
    # One eligible row left of a (nearly) emptied table is still refused.
    session, stmts = _table(max(rows, 10), 1)
    with pytest.raises(FullTableRefused, match="already deleted"):
        judge_table(
            session,
            SWEEP,
            stmts,
            {},  # type: ignore[arg-type]
            EligibleMeasure({}, float(max(rows, 10)), 1.0),
            0.5,
            TableWindow(0.0, 1900.0, deleted),
        )


# -- the deleted-rows counter counts durable deletes only --------------------------------------


class _WalSession(FakeSession):
    """A session whose WAL marks are 1, 2, 3 ... and flushed up to ``flushed``; ``gone``:
    the connection fails."""

    def __init__(self) -> None:
        super().__init__()
        self.next_mark = 0
        self.flushed = 0
        self.gone = False
        self.started = "first"

    def wal_mark(self, earlier: str | None = None, started: str | None = None) -> WalMark:
        if self.gone:
            raise ConnectionFailed("server closed the connection unexpectedly")
        self.next_mark += 1
        same = started in (None, self.started)
        durable = earlier is None or (same and int(earlier) <= self.flushed)
        return WalMark(str(self.next_mark), self.started, same, durable)


def test_rows_are_counted_once_durable_and_never_when_unknown() -> None:
    session = _WalSession()
    run = _run(session, FakeHeap.of("nodes", blocks=1, per_block=1, garbage=[]))
    durable = run.tally.durable
    assert durable is not None
    durable.sleep = lambda seconds: session.clock.advance(seconds)

    def counted() -> float | None:
        return _metric(run, "reaper_deleted_rows_total", table=SWEEP.table, reason=SWEEP.reason)

    def batch(rows: int) -> None:
        run.tally.batch(rows, 0.1)
        run.gate.before_batch()  # before the next batch: where durability is checked

    batch(100)  # the first batch sets mark 1 over its rows
    assert counted() == 0
    session.clock.advance(0.5)
    batch(50)  # under a second since the last check: no round trip
    assert session.next_mark == 1 and counted() == 0
    session.clock.advance(1.0)
    batch(25)  # mark 1 not flushed yet: nothing counted
    assert counted() == 0
    session.flushed = 1
    session.clock.advance(1.0)
    batch(10)  # mark 1 flushed: its 100 rows; the 85 since wait under mark 3
    assert counted() == 100
    session.flushed = 99  # the end of the run waits until every batch's rows are counted
    assert durable.count(wait=5.0) == 0
    assert counted() == 185
    # The connection fails: the rows wait, and another session of the same server counts
    # them (a killed backend: the server kept them).
    run.tally.batch(40, 0.1)
    session.gone = True
    assert durable.count(wait=5.0) == 40 and counted() == 185
    other = _WalSession()
    other.flushed, other.next_mark = 99, session.next_mark
    assert durable.count(wait=5.0, session=other) == 0
    assert counted() == 225
    # A server restarted (or another one, after a failover) since: never counted.
    session.gone, session.flushed = False, 99
    run.tally.batch(30, 0.1)
    session.started = "second"
    assert durable.count(wait=5.0) == 0
    assert counted() == 225
    # A flush that never comes within the wait: left uncounted, for the caller to give up.
    session.started, session.flushed = "first", 0
    run.tally.batch(20, 0.1)
    assert durable.count(wait=0.5) == 20
    assert counted() == 225

"""The parallel heap walk's decisions against in-memory sessions (tests/unit/engine/fakes.py):
disjoint ranges on the run's session and its helpers' (each row deleted once, the counters
equal to the rows gone), helpers only while the database is idle, the row budget and a stop
across workers, and a helper's failure ending the run once. The real thing on PostgreSQL:
tests/db/engine (the invariant tests run with ``--parallel`` above 1)."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from reaper import errors
from reaper.config.engine import engine_options
from reaper.config.settings import Settings, build_settings
from reaper.config.sweeps import Budget, by_name, configured_sweeps
from reaper.db import BatchRows
from reaper.db.rows import Sample, Standby
from reaper.engine.batches import batch_strategy
from reaper.engine.context import Run, RunSpec, RunTools
from reaper.engine.deleter import Deleter
from reaper.engine.pacing import Pacer
from reaper.engine.sizing import BatchSizer
from reaper.vocab import StopReason, Strategy
from tests.unit.engine.fakes import FakeHeap, FakeSession, Tid, statements

# The fakes' heaps are plain dicts: the workers' statements take turns, as a server's
# transactions on disjoint rows would not need to (the decisions are what is tested here).
_LOCK = threading.RLock()


@dataclass
class _Session(FakeSession):
    """A FakeSession whose statements take turns with the other workers'. ``fail_after``:
    its batches raise a lost connection after that many. ``started``: set at its first batch;
    ``await_helpers``: its batches after the first wait (a few seconds at most) until these
    are set, so that every worker gets a range before another walks them all.
    """

    fail_after: int | None = None
    # Its batches after that many wait past their lock timeout for a lock no row is to blame
    # for (another worker's, or a migration's).
    table_lock_after: int | None = None
    batches: list[tuple[int, int]] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)
    await_helpers: list[threading.Event] = field(default_factory=list)

    def delete_heap_batch(
        self,
        stmts: Any,
        hs: Any,
        params: Any,
        first: Tid,
        end_block: int,
        limit: int,
        skip: Sequence[Tid] = (),
        range_first: bool = True,
        before_commit: Any = None,
    ) -> BatchRows:
        self.started.set()
        if self.batches:
            for event in self.await_helpers:
                event.wait(5.0)
        with _LOCK:
            if self.fail_after is not None and len(self.batches) >= self.fail_after:
                raise errors.ConnectionFailed("server closed the connection unexpectedly")
            if self.table_lock_after is not None and len(self.batches) >= self.table_lock_after:
                exc = errors.LockTimeout("canceling statement due to lock timeout")
                exc.sqlstate = "55P03"
                raise exc
            self.batches.append((first[0], end_block))
            return super().delete_heap_batch(
                stmts, hs, params, first, end_block, limit, skip, range_first, before_commit
            )

    def first_victim(self, *args: Any, **kwargs: Any) -> Tid | None:
        with _LOCK:
            return super().first_victim(*args, **kwargs)


def _settings(**values: Any) -> Settings:
    return build_settings({"dsn": "postgresql://reaper@127.0.0.1/reaper", **values})


def _run(
    heap: FakeHeap,
    parallel: int,
    helpers: list[_Session],
    *,
    budget: Budget | None = None,
    pace: Pacer | None = None,
    stop: threading.Event | None = None,
    await_helpers: bool = False,
) -> tuple[Run, _Session]:
    settings = _settings()
    sweep = by_name(configured_sweeps(settings))["nodes_silent"]
    own = _Session()
    if await_helpers:
        # Every worker's batches after its first wait until every other worker has started.
        workers = [own, *helpers]
        for w in workers:
            w.await_helpers = [o.started for o in workers if o is not w]
    lent = iter(helpers)

    @contextlib.contextmanager
    def helper_session() -> Iterator[_Session]:
        yield next(lent)

    options = dataclasses.replace(engine_options(settings), parallel=parallel)
    run = Run.begin(
        RunSpec(sweep, statements(heap), {}, options, budget or Budget()),
        RunTools(own, helper_session=helper_session),  # type: ignore[arg-type]
        stop=stop,
        pacer=pace,
    )
    return run, own


def _walk(run: Run, batch_size: int = 100) -> StopReason:
    (hs,) = run.spec.statements.heaps
    sizer = BatchSizer(batch_size, run.spec.options.statement_timeout_seconds)
    return batch_strategy(Strategy.HEAP, run.spec.options, 0.5).run(Deleter(run, hs, sizer))


def _heap(blocks: int = 400) -> FakeHeap:
    # Half of every block's rows garbage; a block costs a millisecond to scan.
    heap = FakeHeap.of(
        "nodes",
        blocks=blocks,
        per_block=10,
        garbage=[(b, o) for b in range(blocks) for o in range(1, 6)],
    )
    heap.block_seconds = 0.001
    return heap


def _blocks(session: _Session) -> set[int]:
    return {b for first, end in session.batches for b in range(first, end)}


def _pacer(busy: bool) -> Pacer:
    return Pacer(
        lambda: Sample(wal_lsn=0, busy_sessions=int(busy)),
        max_replica_lag=10.0,
        busy_share=0.5,
        wait=lambda seconds: False,
    )


@pytest.mark.parametrize("parallel", [2, 3])
def test_workers_walk_disjoint_ranges_and_every_garbage_row_goes_once(parallel: int) -> None:
    heap = _heap()
    live = len(heap.rows) - len(heap.garbage)
    helpers = [_Session() for _ in range(parallel - 1)]
    run, own = _run(heap, parallel, helpers, await_helpers=True)
    assert _walk(run) == StopReason.DONE
    assert heap.garbage == [] and len(heap.rows) == live
    # Every garbage row counted once: the counters are the rows gone.
    assert run.result.rows == 400 * 5
    assert run.result.batches == sum(len(s.batches) for s in [own, *helpers])
    # The helpers deleted too, in ranges no other worker touched.
    workers = [_blocks(s) for s in [own, *helpers]]
    assert all(workers)
    assert sum(len(w) for w in workers) == len(set().union(*workers)) == 400


def test_helpers_wait_while_the_database_is_busy() -> None:
    heap = _heap()
    helpers = [_Session()]
    run, own = _run(heap, 2, helpers, pace=_pacer(busy=True))
    assert _walk(run) == StopReason.DONE
    assert heap.garbage == []
    # Live traffic: the run's own session alone deleted; the helper never did.
    assert helpers[0].batches == [] and _blocks(own) == set(range(400))


def test_helpers_delete_while_the_database_is_idle() -> None:
    heap = _heap()
    helpers = [_Session()]
    run, _ = _run(heap, 2, helpers, pace=_pacer(busy=False), await_helpers=True)
    assert _walk(run) == StopReason.DONE
    assert heap.garbage == [] and helpers[0].batches


def test_parallel_one_is_the_walk_on_one_connection() -> None:
    heap = _heap()
    run, own = _run(heap, 1, [])
    assert _walk(run) == StopReason.DONE
    assert heap.garbage == [] and _blocks(own) == set(range(400))


def test_the_row_budget_holds_across_workers() -> None:
    heap = _heap()
    helpers = [_Session(), _Session()]
    run, _ = _run(heap, 3, helpers, budget=Budget(max_rows=450))
    assert _walk(run) == StopReason.MAX_ROWS
    # The workers' batches in flight share what the budget has left: never past it.
    assert run.result.rows == 450
    assert len(heap.garbage) == 2000 - run.result.rows


def test_a_stop_ends_every_worker() -> None:
    heap = _heap()
    stop = threading.Event()
    stop.set()
    helpers = [_Session()]
    run, own = _run(heap, 2, helpers, stop=stop)
    assert _walk(run) == StopReason.STOP
    assert own.batches == [] and helpers[0].batches == []
    assert len(heap.garbage) == 2000


def test_a_helpers_failure_ends_the_run_once_and_its_batches_stay_counted() -> None:
    heap = _heap()
    helpers = [_Session(fail_after=2)]
    run, _ = _run(heap, 2, helpers, await_helpers=True)
    with pytest.raises(errors.ConnectionFailed):
        _walk(run)
    # What committed before the failure is counted, exactly.
    assert run.result.rows == 2000 - len(heap.garbage) > 0


def test_a_lock_wait_between_workers_leaves_the_run_its_own_connection() -> None:
    # A helper's batch waits past its lock timeout for a table-level lock (another worker's
    # extension of an archive table, say): the helper gives its range back and the run goes
    # on alone; every garbage row goes, nothing is skipped, the run does not fail.
    heap = _heap()
    helpers = [_Session(table_lock_after=1)]
    run, _ = _run(heap, 2, helpers, await_helpers=True)
    assert _walk(run) == StopReason.DONE
    assert heap.garbage == [] and run.result.skipped == {}
    assert run.result.rows == 2000
    assert len(helpers[0].batches) == 1


def test_a_lock_wait_alone_still_fails_the_run() -> None:
    # On the run's own session, with no helper deleting, it is a table lock held past
    # lock_timeout (a migration): the run fails, as on one connection.
    heap = _heap()
    run, own = _run(heap, 2, [_Session()], pace=_pacer(busy=True))
    own.table_lock_after = 2
    with pytest.raises(errors.LockTimeout):
        _walk(run)


@pytest.mark.parametrize(
    ("busy", "lag", "max_lag", "idle"),
    [
        (False, None, 10.0, True),  # alone, no standby
        (False, 0.5, 10.0, True),  # a standby keeping up
        (False, 2.0, 10.0, False),  # a standby more than a second behind
        (False, 0.5, 1.0, False),  # ... or more than a quarter of max_replica_lag
        (False, 5.0, None, True),  # replica pacing off: its lag is not the pacer's concern
        (True, None, 10.0, False),  # live traffic
    ],
)
def test_the_pacer_says_idle_only_without_traffic_or_a_standby_behind(
    busy: bool,
    lag: float | None,
    max_lag: float | None,
    idle: bool,
) -> None:
    standbys = () if lag is None else (Standby("standby", True, None, lag),)
    pacer = Pacer(
        lambda: Sample(wal_lsn=0, busy_sessions=int(busy), standbys=standbys),
        max_replica_lag=max_lag,
        busy_share=0.5,
        wait=lambda seconds: False,
    )
    assert not pacer.idle()  # nothing measured yet
    assert pacer(None, None) is None
    assert pacer.idle() is idle

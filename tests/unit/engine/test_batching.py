"""The batch-size policy (reaper.engine.sizing), with plain numbers: no database, no clock."""

from __future__ import annotations

from reaper.engine.sizing import BatchSizer, Splitter


def test_a_timeout_halves_until_it_fits_and_fast_batches_grow_back() -> None:
    sizer = BatchSizer(1000, timeout_seconds=0.3)
    # A delete costs 1 ms a row (a cascade): 1000 and 500 rows run past 300 ms.
    assert [sizer.timed_out(), sizer.timed_out()] == [500, 250]
    # 250 rows take 250 ms: under the timeout, but not fast: the limit holds.
    assert sizer.succeeded(0.25) == 250
    # The cost drops (the cascade's children are gone): the limit grows back, by doubling
    # and at most an eighth of the ceiling per fast batch, never past the ceiling.
    grown = [sizer.succeeded(0.01) for _ in range(8)]
    assert grown == [375, 500, 625, 750, 875, 1000, 1000, 1000]


def test_the_limit_never_leaves_one_to_ceiling() -> None:
    sizer = BatchSizer(3, timeout_seconds=1.0)
    for _ in range(10):
        sizer.timed_out()
    assert sizer.size == 1
    assert sizer.succeeded(0.0) == 2
    assert BatchSizer(0).size == 1
    assert BatchSizer(10, size=50).size == 10


def test_from_one_row_growth_doubles() -> None:
    sizer = BatchSizer(10_000, timeout_seconds=10.0, size=1)
    assert [sizer.succeeded(0.001) for _ in range(5)] == [2, 4, 8, 16, 32]


def test_no_statement_timeout_means_every_batch_is_fast() -> None:
    sizer = BatchSizer(100, timeout_seconds=0.0, size=10)
    assert sizer.succeeded(60.0) == 20


def test_a_slow_batch_that_did_not_time_out_does_not_grow() -> None:
    sizer = BatchSizer(100, timeout_seconds=1.0, size=10)
    assert sizer.succeeded(0.5) == 10


def test_a_failing_batch_is_never_repeated_unchanged() -> None:
    splitter = Splitter()
    assert splitter.next_limit(1000) == 1000
    limits = []
    limit = 1000
    while limit > 1:
        limit = splitter.failed(limit)
        limits.append(limit)
    assert limits == [500, 250, 125, 62, 31, 15, 7, 3, 1]
    assert all(b < a for a, b in zip([1000, *limits], limits, strict=False))
    # A success ends the split: the next batch takes the sizer's limit again.
    splitter.succeeded()
    assert splitter.next_limit(800) == 800
    # While splitting, a sizer smaller than the split limit wins.
    splitter.failed(100)
    assert splitter.next_limit(20) == 20

"""Cron schedules mean what crontab means: every expression of cron_table.json fires at the
times an independent crontab implementation computed, through the trigger the daemon uses.
The table was generated once with cronsim 2.8 (which follows Debian's and cronie's cron;
no dependency of reaper's):

    from cronsim import CronSim
    it = CronSim(expression, after)
    next_times = [next(it) for _ in range(8)]

Its expressions: days of the week by number (0 and 7 are Sunday) and by name, both day fields
restricted (either matches), a day field starting with ``*`` (unrestricted: the day fields are
ANDed, as cronie reads them), steps, month names and leap days. (croniter 6.0.0 was tried
first: it skips the 1st of March for ``0 0 */10 * *``.)
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reaper.config.schedule import Cron, parse_cron

TABLE = json.loads((Path(__file__).with_name("cron_table.json")).read_text())


def fire_times(expression: str, after: datetime, n: int) -> list[datetime]:
    trigger = Cron(parse_cron(expression)).trigger()
    out: list[datetime] = []
    previous = None
    for _ in range(n):
        when = trigger.get_next_fire_time(previous, previous or after)
        assert when is not None
        if previous is None and when <= after:
            when = trigger.get_next_fire_time(when, when)
        out.append(when.astimezone(UTC))
        previous = when
    return out


@pytest.mark.parametrize(
    "case", TABLE, ids=[f"{c['expression']} after {c['after'][:10]}" for c in TABLE]
)
def test_next_fire_times_are_crontabs(case: dict[str, object]) -> None:
    after = datetime.fromisoformat(str(case["after"]))
    expected = [datetime.fromisoformat(t) for t in case["next"]]  # type: ignore[attr-defined]
    assert fire_times(str(case["expression"]), after, len(expected)) == expected


def test_the_table_covers_the_crontab_forms() -> None:
    expressions = {c["expression"] for c in TABLE}
    for form in ("0 3 * * 1-5", "0 3 * * 0", "0 3 * * 7", "0 3 1 * mon", "0 3 * * 5-7"):
        assert form in expressions, form


def test_both_day_fields_restricted_means_either() -> None:
    """``0 3 1 * mon``: the 1st of each month and every Monday, not Mondays that are the 1st
    (next such one: 2027-02-01)."""
    after = datetime(2026, 12, 2, tzinfo=UTC)
    times = fire_times("0 3 1 * mon", after, 6)
    assert [t.date().isoformat() for t in times] == [
        "2026-12-07",
        "2026-12-14",
        "2026-12-21",
        "2026-12-28",
        "2027-01-01",
        "2027-01-04",
    ]


def test_a_starred_day_field_is_unrestricted() -> None:
    """cronie: a field that starts with ``*`` does not count as restricted, so ``*/2`` in the
    day of the week is ANDed with the day of the month (the 1st..7th that are Sun, Tue, Thu or
    Sat), and ``*/10`` in the day of the month with the day of the week."""
    after = datetime(2026, 12, 1, tzinfo=UTC)  # a Tuesday
    days = [t.date() for t in fire_times("0 3 1-7 * */2", after, 4)]
    assert [d.isoformat() for d in days] == ["2026-12-01", "2026-12-03", "2026-12-05", "2026-12-06"]
    days = [t.date() for t in fire_times("0 3 */10 * mon", after, 2)]
    assert all(d.weekday() == 0 and d.day in (1, 11, 21, 31) for d in days), days


@pytest.mark.parametrize(
    "expression", ["0 3 * * 8", "0 3 * * 5-1", "0 3 * * 3/2", "0 3 * * funday", "0 3 * * */0"]
)
def test_a_day_that_is_none_is_refused(expression: str) -> None:
    with pytest.raises(ValueError):
        parse_cron(expression)

"""Sweeps of one table whose retentions disagree: when their rules can match the same row,
the one with the shorter retention deletes rows the other means to keep.

A global 30-day sweep of ``messages`` and a 365-day one with ``where = { channel = "legal" }``
both match a legal message 40 days old: the first deletes it, whatever the second says. Each
sweep deletes what its own rules match; no sweep protects rows from another. This module
decides, from the sweeps' declarations alone (no database), which pairs can collide: two
rules can match one row unless a column they both filter takes no value both allow. A
built-in sweep's rules are reviewed SQL: two built-ins overlap by design (the ephemeral
requests go sooner), and a built-in beside a declared sweep counts as overlapping.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations

from reaper.config.sweeps import Sweep
from reaper.config.values import format_duration
from reaper.sqltext.declared import Filter, Rule


@dataclass(frozen=True)
class Overlap:
    """Two sweeps of one table that can match one row, ``shorter`` deleting rows ``longer``
    keeps.

    Attributes:
        shorter, longer: the sweeps, by their shortest and longest retention.
        exception: ``shorter``'s rules are ``longer``'s narrowed (every filter of the longer
            is one of the shorter's): a deliberate exception, such rows go sooner. Otherwise
            the shorter is as broad or broader: the longer's retention holds for none of the
            rows they share.
    """

    shorter: Sweep
    longer: Sweep
    exception: bool

    def detail(self) -> str:
        """One line: who deletes what the other keeps."""
        short = format_duration(min(self.shorter.retentions.values()))
        long = format_duration(max(self.longer.retentions.values()))
        if self.exception:
            return (
                f"sweeps {self.shorter.name} ({short}) and {self.longer.name} ({long}) can match "
                f"the same rows: {self.shorter.name} narrows {self.longer.name}'s rules, so its "
                f"rows go after {short}, not {long}"
            )
        return (
            f"sweeps {self.shorter.name} ({short}) and {self.longer.name} ({long}) can match "
            f"the same rows: {self.shorter.name} deletes them after {short}, so "
            f"{self.longer.name}'s {long} holds for none of them"
        )

    def fix(self) -> str:
        """How to make the two agree."""
        return (
            f"give [sweeps.{self.shorter.name}] a filter that excludes {self.longer.name}'s "
            "rows (where_not = { column = value }), or the same retention"
        )


def _excludes(a: Filter, b: Filter) -> bool:
    """No value of their column satisfies both filters (same column)."""
    kinds = {a.op, b.op}
    if kinds == {"eq"}:
        return not set(a.values) & set(b.values)
    if kinds == {"eq", "ne"}:
        eq, ne = (a, b) if a.op == "eq" else (b, a)
        return set(eq.values) <= set(ne.values)
    # NULL is neither equal nor unequal to any value.
    return "null" in kinds and bool(kinds & {"eq", "ne", "not_null"})


def _filters(rule: Rule) -> tuple[Filter, ...]:
    return (*rule.where, *rule.age_when)


def _rules_disjoint(a: Rule, b: Rule) -> bool:
    return any(
        fa.column == fb.column and _excludes(fa, fb) for fa in _filters(a) for fb in _filters(b)
    )


def _disjoint(a: Sweep, b: Sweep) -> bool:
    """No row can match both sweeps' rules (False when a sweep's rules are reviewed SQL)."""
    ra, rb = a.predicate.rules, b.predicate.rules
    if not ra or not rb:
        return False
    return all(_rules_disjoint(x, y) for x in ra for y in rb)


def _narrows(shorter: Sweep, longer: Sweep) -> bool:
    """Every rule of ``shorter`` carries every filter of some rule of ``longer``."""
    rs, rl = shorter.predicate.rules, longer.predicate.rules
    if not rs or not rl:
        return False
    return all(any(set(_filters(lr)) < set(_filters(sr)) for lr in rl) for sr in rs)


def overlaps(sweeps: Sequence[Sweep]) -> Iterator[Overlap]:
    """Every pair of ``sweeps`` on one table whose retentions differ and whose rules can match
    one row (pairs of built-in sweeps aside)."""
    for a, b in combinations(sweeps, 2):
        if a.table != b.table or (a.builtin and b.builtin):
            continue
        if set(a.retentions.values()) == set(b.retentions.values()) or _disjoint(a, b):
            continue
        shorter, longer = sorted(
            (a, b), key=lambda s: (min(s.retentions.values()), max(s.retentions.values()))
        )
        if min(shorter.retentions.values()) >= max(longer.retentions.values()):
            continue
        yield Overlap(shorter, longer, exception=_narrows(shorter, longer))

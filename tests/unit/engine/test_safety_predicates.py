"""A declared predicate can only delete by age and can run no code.

Against a real PostgreSQL: a predicate with a branch true regardless of age is refused at
load (exit 2, one line naming the part); a predicate that names a function, operator, type or
relation that could run code is refused by the server's catalog before any statement
evaluates it, in run-once, --dry-run, status, check and the daemon's gauges; the function never
runs (its side effect is asserted absent) and every row stays.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from reaper.sqltext.predicates import PredicateError, check
from tests.support import BUILTIN_SWEEPS

# -- the rule, from the parse tree -------------------------------------------------------------

REFUSED_SHAPES = [
    # (predicate, the part the message names)
    ("enrolled_at < %(cutoff)s OR true", "`TRUE` is not bounded"),
    ("%(cutoff)s IS NOT NULL", "`%(cutoff)s IS NOT NULL`"),
    ("enrolled_at < %(cutoff)s OR NOT banned", "`NOT banned` is not bounded"),
    ("enrolled_at < %(cutoff)s + interval '100 years'", "wraps a cutoff"),
    ("enrolled_at < greatest(%(cutoff)s, now())", "wraps a cutoff"),
    ("enrolled_at < %(cutoff)s::date + 36500", "wraps a cutoff"),
    ("NOT (enrolled_at >= %(cutoff)s)", "`NOT enrolled_at >= %(cutoff)s`"),
    ("(enrolled_at < %(cutoff)s) IS NOT FALSE", "IS NOT FALSE"),
    ("CASE WHEN banned THEN false ELSE enrolled_at < %(cutoff)s OR true END", "CASE WHEN"),
    ("coalesce(enrolled_at < %(cutoff)s, true)", "COALESCE("),
    ("now() < %(cutoff)s", "names no column of nodes"),
    ("'-infinity'::timestamptz < %(cutoff)s", "names no column of nodes"),
    ("(SELECT min(enrolled_at) FROM nodes) < %(cutoff)s", "compares a subquery"),
    ("enrolled_at > %(cutoff)s", "`enrolled_at > %(cutoff)s`"),
    ("enrolled_at = %(cutoff)s OR true", "`enrolled_at = %(cutoff)s`"),
    ("enrolled_at < %(cutoff)s AND %(cutoff)s IS NOT NULL", "`%(cutoff)s IS NOT NULL`"),
    ("enrolled_at OPERATOR(pg_catalog.<) %(cutoff)s", "OPERATOR(pg_catalog.<)"),
    ("(enrolled_at < %(cutoff)s OR banned) OR peer_id LIKE 'k%%'", "`banned` is not bounded"),
    ("enrolled_at < %(cutoff)s OR (banned AND peer_id IS NOT NULL)", "is not bounded"),
    # The column side must be a row's own value: anything else can shift it to any age.
    ("least(enrolled_at, '-infinity') < %(cutoff)s", "`'-infinity'` can shift a row's age"),
    ("enrolled_at - interval '100 years' < %(cutoff)s", "can shift a row's age"),
    ("(CASE WHEN peer_id <> '' THEN '-infinity'::timestamptz ELSE enrolled_at END)"
     " < %(cutoff)s", "can shift a row's age"),
    ("(CASE WHEN banned THEN enrolled_at ELSE '-infinity' END) < %(cutoff)s",
     "can shift a row's age"),
    ("coalesce(expires_at, '-infinity') < %(cutoff)s", "`'-infinity'` can shift"),
    ("coalesce(expires_at, least(enrolled_at, now())) < %(cutoff)s", "`now()` can shift"),
    ("greatest(expires_at, enrolled_at + interval '1 day') < %(cutoff)s", "can shift"),
    ("enrolled_at::date < %(cutoff)s", "can shift a row's age"),
    ("enrolled_at::timestamptz < %(cutoff)s", "can shift a row's age"),
    ("date_trunc('day', enrolled_at) < %(cutoff)s", "can shift a row's age"),
    ("-(-enrolled_at) < %(cutoff)s OR false", "can shift"),
    ("enrolled_at < %(cutoff)s OR coalesce(expires_at, NULL) < %(cutoff)s", "can shift"),
]


@pytest.mark.parametrize(("predicate", "part"), REFUSED_SHAPES)
def test_unbounded_shapes_are_refused_by_the_parser(predicate: str, part: str) -> None:
    with pytest.raises(PredicateError) as info:
        check(predicate, "nodes", {"cutoff"})
    message = str(info.value)
    assert part in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    "predicate",
    [
        "enrolled_at < %(cutoff)s",
        "enrolled_at <= %(cutoff)s AND NOT banned",
        "%(cutoff)s > enrolled_at",
        "%(cutoff)s >= enrolled_at AND NOT banned",
        "nodes.enrolled_at < %(cutoff)s OR (banned AND expires_at < %(cutoff)s)",
        "(expires_at < %(cutoff)s OR (expires_at IS NULL AND enrolled_at < %(cutoff)s))"
        " AND NOT banned",
        "coalesce(expires_at, enrolled_at) < %(cutoff)s",
        "greatest(expires_at, nodes.enrolled_at) < %(cutoff)s",
        "least(coalesce(expires_at, enrolled_at), greatest(enrolled_at, expires_at))"
        " < %(cutoff)s",
        "(CASE WHEN NOT banned THEN enrolled_at END) < %(cutoff)s",
        "(CASE WHEN banned THEN NULL WHEN peer_id <> '' THEN enrolled_at ELSE NULL END)"
        " < %(cutoff)s",
        "enrolled_at < %(cutoff)s AND date_trunc('day', enrolled_at) < now()",
        "enrolled_at < %(cutoff)s AND peer_id IN (SELECT peer_id FROM nodes WHERE banned)",
    ],
)
def test_bounded_shapes_are_accepted(predicate: str) -> None:
    check(predicate, "nodes", {"cutoff"})


def test_every_builtin_predicate_follows_the_rule() -> None:
    for sweep in BUILTIN_SWEEPS:
        check(sweep.predicate, sweep.table, set(sweep.retentions))


def test_every_example_predicate_follows_the_rule() -> None:
    examples = Path(__file__).resolve().parents[1] / "examples"
    checked = 0
    for path in sorted(examples.glob("*.toml")):
        for sweep in tomllib.loads(path.read_text()).get("sweeps", {}).values():
            if "predicate" in sweep:
                check(sweep["predicate"], sweep["table"], {"cutoff"})
                checked += 1
    assert checked >= 2


# -- the allow-list, from the server's catalog -----------------------------------------------


# -- user types, casts and extensions --------------------------------------------------------



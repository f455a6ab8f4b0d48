"""One ``[sweeps.NAME]`` table of the TOML file, parsed: :class:`SweepSettings`.

Its keys are the per-sweep settings (:func:`reaper.config.settings.setting_keys`), which
follow from their declarations, and the keys of its own fields: what a sweep is (``table``,
its rules) and what only a sweep has (``enabled``, ``retention``, ``after``, its archive).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from reaper.config.values import (
    archive_file,
    boolean,
    check_text,
    identifier,
    keyed,
    nonempty_text,
    one_line,
    positive_duration,
    scalar,
    shown,
)

# The range of a PostgreSQL bigint: an integer a filter compares with is cast to int8.
_INT8 = (-(2**63), 2**63 - 1)


def retentions(value: Any) -> timedelta | dict[str, timedelta]:
    if isinstance(value, dict):
        if not value:
            raise ValueError('an empty table; give { cutoff_name = "30d", ... }')
        out = {}
        for param, raw in value.items():
            if not re.fullmatch(r"[a-z_][a-z0-9_]*", param):
                raise ValueError(f"{param!r} is not a parameter name (lower case, digits, _)")
            out[param] = keyed(param, scalar(positive_duration), raw)
        return out
    d: timedelta = scalar(positive_duration)(value)
    return d


def sweep_names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError('must be a list of sweep names, e.g. after = ["other_sweep"]')
    for v in value:
        check_text(v)
    return tuple(value)


def column_names(value: Any) -> tuple[str, ...]:
    """One column name or a non-empty list of them, without repeats."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names:
        raise ValueError(f'{shown(value)}: give a column name or a list, e.g. ["a", "b"]')
    out = tuple(identifier(n) for n in names)
    if len(set(out)) != len(out):
        raise ValueError(f"names a column twice: {', '.join(out)}")
    return out


def filter_value(value: Any) -> tuple[str | int | bool, ...]:
    """What a filter compares a column with: a string, an integer or a boolean, or a
    non-empty list of values of one of these kinds (IN)."""
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ValueError("an empty list matches no row; give at least one value")
    kinds = {bool if isinstance(v, bool) else type(v) for v in values}
    if not kinds <= {str, int, bool}:
        raise ValueError(
            f"{shown(value)}: a filter compares with text, whole numbers or true/false"
        )
    if len(kinds) > 1:
        raise ValueError(f"{shown(value)}: mixes kinds of values; give values of one kind")
    for v in values:
        if isinstance(v, str):
            check_text(v)
        elif not isinstance(v, bool) and not _INT8[0] <= v <= _INT8[1]:
            raise ValueError(f"{v} is outside the range of a bigint")
    return tuple(values)


def filter_table(value: Any) -> dict[str, tuple[str | int | bool, ...]]:
    """``{ column = value | [values], ... }``: column -> its values."""
    if not isinstance(value, dict) or not value:
        raise ValueError(
            f'{shown(value)}: give a table of columns, e.g. {{ token_type = "worker" }}'
        )
    return {identifier(k): keyed(k, filter_value, v) for k, v in value.items()}


def table_list(value: Any) -> tuple[dict[str, Any], ...]:
    """One TOML table or an array of them (their keys are checked by their reader)."""
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        raise ValueError("give a table, or an array of tables ([[...]])")
    return tuple(dict(i) for i in items)


def _key(parse: Callable[[Any], Any], *, declares: bool = False) -> dict[str, Any]:
    """A field's metadata: its key's value type; ``declares``: the key declares a sweep
    (a built-in sweep's table refuses it)."""
    return {"parse": parse, "declares": declares}


@dataclass(frozen=True)
class SweepSettings:
    """One ``[sweeps.NAME]`` table, parsed (durations as timedelta).

    For a built-in sweep it holds overrides; with ``table`` set it declares a new sweep
    (:func:`reaper.config.sweeps.configured_sweeps` turns both into
    :class:`reaper.config.sweeps.Sweep`).

    Attributes:
        own: the settings it sets for this sweep, by name
            (:func:`reaper.config.settings.setting_keys`), parsed.
        enabled: False: the sweep runs only when named (``run-once --sweep NAME``).
        retention: one duration (a built-in's cutoff, or a declared sweep's one rule), or
            cutoff parameter name -> duration for a built-in with several cutoffs; None: no
            override.
        after: sweeps that must run before this one.
        archive: ``schema.table`` that each batch inserts the rows it deletes into, in the
            statement that deletes them (None: no archive table).
        archive_file: an absolute path, or ``-`` for standard output, that each batch's
            deleted rows are written to as JSON lines before its COMMIT (None: none).
        table, reason, description: a declared sweep's (None for a built-in).
        age, age_when, where, where_not, is_null, not_null: a declared sweep's one rule
            (``docs/custom-sweeps.md``); ``rule``: its rules when it has several, each a table
            of these keys and ``retention``; ``keep_referenced``: the references that keep a
            row. Checked by :mod:`reaper.config.declare`.
        predicate, since: SQL text of a former release's declaration, kept only to refuse it
            with its translation (no SQL text of a config file reaches the server).
        key: a declared sweep's key columns, that name each deleted row in its batch's
            ``batch_keys`` line (None: the table's primary key).
    """

    own: Mapping[str, Any] = field(default_factory=dict)
    enabled: bool = field(default=True, metadata=_key(scalar(boolean)))
    retention: timedelta | Mapping[str, timedelta] | None = field(
        default=None, metadata=_key(retentions)
    )
    after: tuple[str, ...] = field(default=(), metadata=_key(sweep_names))
    archive: str | None = field(default=None, metadata=_key(one_line))
    archive_file: str | None = field(default=None, metadata=_key(scalar(archive_file)))
    table: str | None = field(default=None, metadata=_key(one_line, declares=True))
    reason: str | None = field(default=None, metadata=_key(one_line, declares=True))
    description: str | None = field(default=None, metadata=_key(nonempty_text, declares=True))
    age: tuple[str, ...] | None = field(default=None, metadata=_key(column_names, declares=True))
    age_when: Mapping[str, tuple[str | int | bool, ...]] | None = field(
        default=None, metadata=_key(filter_table, declares=True)
    )
    where: Mapping[str, tuple[str | int | bool, ...]] | None = field(
        default=None, metadata=_key(filter_table, declares=True)
    )
    where_not: Mapping[str, tuple[str | int | bool, ...]] | None = field(
        default=None, metadata=_key(filter_table, declares=True)
    )
    is_null: tuple[str, ...] | None = field(
        default=None, metadata=_key(column_names, declares=True)
    )
    not_null: tuple[str, ...] | None = field(
        default=None, metadata=_key(column_names, declares=True)
    )
    rule: tuple[Mapping[str, Any], ...] | None = field(
        default=None, metadata=_key(table_list, declares=True)
    )
    keep_referenced: tuple[Mapping[str, Any], ...] | None = field(
        default=None, metadata=_key(table_list, declares=True)
    )
    predicate: str | None = field(default=None, metadata=_key(nonempty_text, declares=True))
    since: str | None = field(default=None, metadata=_key(nonempty_text, declares=True))
    key: tuple[str, ...] | None = field(default=None, metadata=_key(column_names, declares=True))


# Its keys other than settings, each with its value type.
FIELDS = {f.name: f for f in dataclasses.fields(SweepSettings) if "parse" in f.metadata}

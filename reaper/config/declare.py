"""A declared sweep's ``[sweeps.NAME]`` table, read as data and compiled into its predicate
(:func:`reaper.sqltext.declared.compile_declaration`); SQL text is refused, with its
translation when :mod:`reaper.sqltext.migrate` knows its shape.

The keys, one rule (``[sweeps.NAME]`` itself) or several (``[[sweeps.NAME.rule]]``), are
documented in ``docs/custom-sweeps.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from reaper.config.sweeptable import SweepSettings, column_names, filter_table
from reaper.config.values import (
    did_you_mean,
    format_duration,
    identifier,
    keyed,
    positive_duration,
    scalar,
)
from reaper.errors import ConfigError
from reaper.sqltext import declared
from reaper.sqltext.declared import Filter, Predicate, Reference, Rule

# The keys of one rule (at the top of [sweeps.NAME], or in each [[sweeps.NAME.rule]]).
RULE_KEYS = ("age", "age_when", "where", "where_not", "is_null", "not_null", "retention")
_RULE_PARSERS: Mapping[str, Callable[[Any], Any]] = {
    "age": column_names,
    "age_when": filter_table,
    "where": filter_table,
    "where_not": filter_table,
    "is_null": column_names,
    "not_null": column_names,
    "retention": scalar(positive_duration),
}
_REFERENCE_KEYS = ("table", "column", "key")
DOCS = "docs/custom-sweeps.md"


def split_table(where: str, text: str, key: str = "table") -> tuple[str, str]:
    """``schema.name`` as ``(schema, name)``, each part exactly as written (case kept).

    Raises:
        ConfigError: not two non-empty parts, or a catalog schema (``pg_catalog``,
            ``information_schema``, ``pg_toast``, ``pg_temp_N``).
    """
    parts = text.split(".")
    if len(parts) != 2 or not all(parts):
        raise ConfigError(
            f"{where} {key}: {text!r} is not schema.name; write the schema too (e.g. "
            f"public.{parts[-1] or 'name'}), as reaper names every table with its schema"
        )
    try:
        schema, name = (keyed(key, identifier, p) for p in parts)
    except ValueError as exc:
        raise ConfigError(f"{where} {exc}") from None
    if declared.is_catalog_schema(schema):
        raise ConfigError(
            f"{where} {key}: {text} is a table of the system catalog ({schema}); reaper never "
            "sweeps or reads one for a declared sweep"
        )
    return schema, name


def legacy_message(name: str, body: SweepSettings) -> str:
    """The one line that refuses a ``predicate`` (or ``since``) of SQL text, with the
    declaration it stands for when its shape is known."""
    from reaper.sqltext import migrate  # pglast, for this message only

    where = f"[sweeps.{name}]"
    if body.predicate is None:
        return (
            f"{where} since: SQL text is no longer accepted; remove it (the backlog's oldest "
            f"row is measured on the first age column; see {DOCS})"
        )
    retention: dict[str, str] = {}
    if isinstance(body.retention, timedelta):
        retention = {"cutoff": format_duration(body.retention)}
    elif body.retention is not None:
        retention = {k: format_duration(v) for k, v in body.retention.items()}
    new = migrate.translate(body.table or "", body.predicate, retention)
    if new is None:
        return (
            f"{where} predicate: SQL text is no longer accepted; declare the sweep as data "
            f"(age, retention, where, keep_referenced; see {DOCS})"
        )
    return (
        f"{where} predicate: SQL text is no longer accepted; replace predicate and retention "
        f"with: {new}"
    )


def _filters(where: str, raw: Mapping[str, Any]) -> tuple[list[Filter], list[Filter]]:
    """(age_when, where) filters of one rule's parsed keys."""
    when = [Filter(c, "eq", v) for c, v in (raw.get("age_when") or {}).items()]
    out = [Filter(c, "eq", v) for c, v in (raw.get("where") or {}).items()]
    out += [Filter(c, "ne", v) for c, v in (raw.get("where_not") or {}).items()]
    out += [Filter(c, "null") for c in raw.get("is_null") or ()]
    out += [Filter(c, "not_null") for c in raw.get("not_null") or ()]
    seen: set[str] = set()
    for f in out:
        if f.column in seen:
            raise ConfigError(f"{where}: column {f.column} has two filters; keep one")
        seen.add(f.column)
    return when, out


def _rule(where: str, raw: Mapping[str, Any]) -> tuple[Rule, timedelta]:
    for key in ("age", "retention"):
        if raw.get(key) is None:
            raise ConfigError(
                f"{where} has no {key} key; a rule needs age (the column(s) that date a row) "
                "and retention"
            )
    retention = raw["retention"]
    if not isinstance(retention, timedelta):
        raise ConfigError(
            f"{where} retention: one duration per rule; for several retentions declare "
            "several rules ([[sweeps.NAME.rule]])"
        )
    when, filters = _filters(where, raw)
    return Rule(tuple(raw["age"]), tuple(when), tuple(filters)), retention


def _parse_rule(where: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(raw) - set(RULE_KEYS))
    if unknown:
        raise ConfigError(
            f"{where} has unknown key {unknown[0]}"
            + (did_you_mean(unknown[0], RULE_KEYS) or f"; a rule takes {', '.join(RULE_KEYS)}")
        )
    try:
        return {k: keyed(k, _RULE_PARSERS[k], v) for k, v in raw.items()}
    except ValueError as exc:
        raise ConfigError(f"{where} {exc}") from None


def _references(name: str, raws: Sequence[Mapping[str, Any]]) -> list[Reference]:
    out = []
    for i, raw in enumerate(raws, 1):
        where = f"[sweeps.{name}] keep_referenced ({i})"
        unknown = sorted(set(raw) - set(_REFERENCE_KEYS))
        if unknown or "table" not in raw or "column" not in raw:
            raise ConfigError(
                f'{where}: give {{ table = "schema.other", column = "its_column", key = '
                '"id" }} (key: this table\'s column it refers to, default id)'
            )
        if not isinstance(raw["table"], str):
            raise ConfigError(f"{where} table: give a string, schema.name")
        schema, table = split_table(where, raw["table"])
        try:
            column = keyed("column", identifier, raw["column"])
            key = keyed("key", identifier, raw.get("key", "id"))
        except ValueError as exc:
            raise ConfigError(f"{where} {exc}") from None
        out.append(Reference(schema, table, column, key))
    return out


def declaration(name: str, body: SweepSettings) -> tuple[Predicate, dict[str, timedelta]]:
    """A declared sweep's predicate, compiled, and its retentions by cutoff parameter.

    Raises:
        ConfigError: one line naming ``[sweeps.NAME]``: SQL text (with its translation), a
            table that is not ``schema.name`` or is the catalog's, a rule without ``age`` or
            ``retention``, an unknown key, both rule keys and ``[[sweeps.NAME.rule]]``.
    """
    where = f"[sweeps.{name}]"
    if body.predicate is not None or body.since is not None:
        raise ConfigError(legacy_message(name, body))
    assert body.table is not None
    schema, table = split_table(where, body.table)
    top = {k: getattr(body, k) for k in RULE_KEYS if getattr(body, k) is not None}
    if body.rule is not None:
        if top:
            first = next(iter(top))
            raise ConfigError(
                f"{where} has both {first} and [[sweeps.{name}.rule]]; with rules, give age, "
                "retention and filters in each rule"
            )
        raws = [_parse_rule(f"[[sweeps.{name}.rule]] ({i})", r) for i, r in enumerate(body.rule, 1)]
        wheres = [f"[[sweeps.{name}.rule]] ({i})" for i in range(1, len(raws) + 1)]
    else:
        raws, wheres = [top], [where]
    rules: list[Rule] = []
    retentions: dict[str, timedelta] = {}
    for n, (raw, at) in enumerate(zip(raws, wheres, strict=True), 1):
        rule, retention = _rule(at, raw)
        rules.append(rule)
        retentions[declared.cutoff_name(n)] = retention
    refs = _references(name, body.keep_referenced or ())
    try:
        predicate = declared.compile_declaration(schema, table, rules, refs)
    except ValueError as exc:
        raise ConfigError(f"{where} {exc}") from None
    return predicate, retentions

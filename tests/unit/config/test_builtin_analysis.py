"""The built-in sweeps' analysis kept as data (reaper/sqltext/analysed.py) is the analysis
that reaper's SQL parser makes of the files as they ship: re-run here and compared, so the
data cannot drift from the files, and every check the analysis makes (each predicate parses,
names every other table with its schema) still holds for each built-in. A predicate built
from the data equals the one built by the parser, for any schema of the tables.

After editing a file of sql/sweeps/, rewrite the data with
``python -m tests.unit.config.test_builtin_analysis``.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import pytest

from reaper import sqltext
from reaper.config.sweeps import BUILTINS
from reaper.engine import partitions
from reaper.sqltext import analysed, declared
from reaper.sqltext.names import TableName, quote_ident

GENERATED = Path(analysed.__file__)
# The schema the analysis is made in; a table there is "the swept table's schema" in the
# data. Nothing of a built-in's analysis but its tables names a schema (checked below).
SENTINEL = "reaper_swept_schema"
REVIEWED = [b for b in BUILTINS if b.rule is None]


def analyse(name: str, table: str) -> dict[str, Any]:
    """What the parser reads in built-in sweep ``name``'s predicate over ``table``.

    Raises:
        ConfigError: the predicate does not parse, or reads a table without its schema.
    """
    text = sqltext.predicate(name)
    swept = TableName(SENTINEL, table)
    live = declared.reviewed(swept, text, ())
    try:
        bound = partitions.key_bound(swept, live.text or "")
        proof: tuple[str, tuple[str, ...]] | str = (bound.column, bound.params)
    except partitions.NotProven as exc:
        proof = str(exc)
    out = {
        "table": table,
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "ages": tuple(a.as_string(None) for a in live.ages),  # type: ignore[attr-defined]
        "columns": live.columns,
        "age_columns": live.age_columns,
        "tables_read": tuple(
            (None if t.schema == SENTINEL else t.schema, t.name) for t in live.tables_read
        ),
        "proof": proof,
    }
    if SENTINEL in repr({k: v for k, v in out.items() if k != "tables_read"}):
        raise AssertionError(f"{name}: its analysis names the schema outside its tables")
    return out


def _literal(value: Any, indent: str) -> str:
    """``value`` as Python source within 100 columns: a long string in pieces."""
    text = repr(value)
    if not isinstance(value, str) or len(indent) + len(text) < 90:
        return text
    words = value.split(" ")
    pieces, line = [], ""
    for word in words:
        if line and len(line) + len(word) > 60:
            pieces.append(line)
            line = ""
        line += word + " "
    pieces.append(line.removesuffix(" "))
    inner = "".join(f"\n{indent}    {p!r}" for p in pieces)
    return f"({inner}\n{indent})"


def render() -> str:
    """The text of reaper/sqltext/analysed.py for the files as they are."""
    head, _, _ = GENERATED.read_text("utf-8").partition("BUILTINS: dict[str, Analysis] = {")
    body = []
    for b in REVIEWED:
        fields = "".join(
            f'        "{k}": {_literal(v, " " * 8)},\n' for k, v in analyse(b.name, b.table).items()
        )
        body.append(f'    "{b.name}": {{\n{fields}    }},\n')
    return f"{head}BUILTINS: dict[str, Analysis] = {{\n{''.join(body)}}}\n"


def test_the_data_is_the_analysis_of_the_files_as_they_ship() -> None:
    assert GENERATED.read_text("utf-8") == render(), (
        "sql/sweeps changed: run python -m tests.unit.config.test_builtin_analysis"
    )
    assert set(analysed.BUILTINS) == {b.name for b in REVIEWED}


@pytest.mark.parametrize("schema", ["public", "gc", "Mixed Case", 'odd"name', "x.y"])
@pytest.mark.parametrize("builtin", REVIEWED, ids=lambda b: b.name)
def test_a_predicate_from_the_data_is_the_one_the_parser_reads(builtin: Any, schema: str) -> None:
    table = TableName(schema, builtin.table)
    cutoffs = tuple(builtin.retention_settings)
    kept = declared.builtin(builtin.name, table, cutoffs)
    text = sqltext.predicate(builtin.name)
    parsed = declared.reviewed(table, text, cutoffs, sqltext.since(builtin.name))
    assert kept.proof is not None  # from the data, not parsed
    for field in ("table", "cutoffs", "columns", "age_columns", "tables_read", "text"):
        assert getattr(kept, field) == getattr(parsed, field), field
    assert [a.as_string(None) for a in kept.ages] == [  # type: ignore[attr-defined]
        a.as_string(None)
        for a in parsed.ages  # type: ignore[attr-defined]
    ]
    for a, b in ((kept.where, parsed.where), (kept.since, parsed.since)):
        assert (a and a.as_string(None)) == (b and b.as_string(None))  # type: ignore[attr-defined]
    assert [type(t) for t in kept.tables_read] == [TableName] * len(kept.tables_read)
    assert kept.text == text.replace("{schema}", quote_ident(schema))
    try:
        bound = partitions.key_bound(table, parsed.text or "")
        assert kept.proof == (bound.column, bound.params)
    except partitions.NotProven as exc:
        assert kept.proof == str(exc)


def test_a_file_unlike_the_one_analysed_is_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "router_leases"
    text = sqltext.predicate(name)
    edited = text.replace("lease_expires_at", "lease_ends_at")
    assert edited != text
    monkeypatch.setattr(sqltext, "predicate", lambda _: edited)
    declared.builtin.cache_clear()
    try:
        p = declared.builtin(name, TableName("public", "routers"), ("cutoff",))
    finally:
        declared.builtin.cache_clear()
    assert p.proof is None  # parsed, not read from the data
    assert p.columns == ("lease_ends_at",)


if __name__ == "__main__":
    GENERATED.write_text(render(), "utf-8")
    print(f"wrote {GENERATED}", file=sys.stderr)

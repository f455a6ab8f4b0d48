"""How reaper names a table: :class:`TableName`, its schema and its name.

Every table reaper reads or deletes from is a :class:`TableName`, built once when the
configuration loads (a built-in sweep's from the ``schema`` setting, a declared sweep's from its
``schema.name``). SQL gets a table only through :attr:`TableName.identifier` or
:attr:`TableName.regclass`, both schema-qualified and quoted part by part: the session's
``search_path`` (pinned to ``pg_catalog, pg_temp`` anyway) never chooses which table a
statement reads, and a same-named table earlier on a role's path is never swept instead.
"""

from __future__ import annotations

import re
from typing import Any

from psycopg import sql

# The schema whose tables are shown without it (``nodes`` for ``public.nodes``).
DEFAULT_SCHEMA = "public"
# A name that may read the same unquoted (folded to lower case): PostgreSQL's quote_ident()
# leaves such a name bare unless it is a keyword that is not unreserved.
_PLAIN = re.compile(r"[a-z_][a-z0-9_]*")
# The keywords quote_ident() quotes (``SELECT word FROM pg_get_keywords() WHERE catcode <>
# 'U'``), PostgreSQL 13 to 18: a table named ``user`` or ``order`` is only ever quoted.
# tests/db/sqltext/test_quote_ident.py holds this list to the server's.
_KEYWORD_LIST = """
    all analyse analyze and any array as asc asymmetric authorization between bigint binary
    bit boolean both case cast char character check coalesce collate collation column
    concurrently constraint create cross current_catalog current_date current_role
    current_schema current_time current_timestamp current_user dec decimal default deferrable
    desc distinct do else end except exists extract false fetch float for foreign freeze from
    full grant greatest group grouping having ilike in initially inner inout int integer
    intersect interval into is isnull join json json_array json_arrayagg json_exists
    json_object json_objectagg json_query json_scalar json_serialize json_table json_value
    lateral leading least left like limit localtime localtimestamp merge_action national
    natural nchar none normalize not notnull null nullif numeric offset on only or order out
    outer overlaps overlay placing position precision primary real references returning right
    row select session_user setof similar smallint some substring symmetric system_user table
    tablesample then time timestamp to trailing treat trim true union unique user using values
    varchar variadic verbose when where window with xmlattributes xmlconcat xmlelement
    xmlexists xmlforest xmlnamespaces xmlparse xmlpi xmlroot xmlserialize xmltable
"""
_KEYWORDS = frozenset(_KEYWORD_LIST.split())


def quote_ident(part: str) -> str:
    """``part`` as a quoted SQL identifier: ``"part"``, each ``"`` doubled (never folded to
    lower case, as an unquoted name would be)."""
    return '"' + part.replace('"', '""') + '"'


def sql_name(part: str) -> str:
    """``part`` as SQL text for a statement shown to a person (a fix to paste): bare where an
    unquoted name reads the same, else quoted (:func:`quote_ident`), as PostgreSQL's
    ``quote_ident()`` does. Every name in a statement reaper shows goes through this, or
    through :attr:`TableName.sql_text`, which applies it to each part."""
    return part if _PLAIN.fullmatch(part) and part not in _KEYWORDS else quote_ident(part)


def sql_literal(text: str) -> str:
    """``text`` as a string literal for a statement shown to a person: ``'text'``, each ``'``
    doubled (standard_conforming_strings, on by default since PostgreSQL 9.1)."""
    return "'" + text.replace("'", "''") + "'"


class TableName(str):
    """A table: its ``schema`` and ``name`` exactly as PostgreSQL spells them (case kept).

    Its text, the one that logs, ``status``, ``check``, JSON and metric labels show, is
    ``name`` for a table of schema ``public`` and ``schema.name`` elsewhere. That text never
    reaches SQL: statements take :attr:`identifier`, parameters take :attr:`regclass`.
    """

    schema: str
    name: str

    def __new__(cls, schema: str, name: str) -> TableName:
        if not schema or not name:
            raise ValueError(f"a table needs a schema and a name, not {schema!r}.{name!r}")
        text = name if schema == DEFAULT_SCHEMA else f"{schema}.{name}"
        self = super().__new__(cls, text)
        self.__dict__.update(schema=schema, name=name)
        return self

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("a TableName is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (TableName, (self.schema, self.name))

    @classmethod
    def parse(cls, text: str, schema: str = DEFAULT_SCHEMA) -> TableName:
        """``schema.name``, or ``name`` in ``schema``, split at its first dot (case kept).
        For names that reaper itself writes (tests, the shipped index file); a config file's
        table goes through :func:`reaper.config.declare.split_table`, which says what is
        wrong with it."""
        if isinstance(text, TableName):
            return text
        own, dot, name = text.partition(".")
        return cls(own, name) if dot else cls(schema, text)

    @property
    def qualified(self) -> str:
        """``schema.name``, unquoted, whatever the schema (a message that must be exact)."""
        return f"{self.schema}.{self.name}"

    @property
    def sql_text(self) -> str:
        """``schema.name`` as SQL text for a statement shown to a person (a GRANT to run):
        each part quoted only where an unquoted one would read differently."""
        return f"{sql_name(self.schema)}.{sql_name(self.name)}"

    @property
    def identifier(self) -> sql.Identifier:
        """The table for a composed statement: ``"schema"."name"``."""
        return sql.Identifier(self.schema, self.name)

    @property
    def regclass(self) -> str:
        """The table as a ``::regclass`` (or ``to_regclass``) parameter: ``"schema"."name"``,
        quoted the way :attr:`identifier` is, so the catalog is asked about the very table
        that the statements name. A value, never composed into SQL."""
        return f"{quote_ident(self.schema)}.{quote_ident(self.name)}"

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
# A name that reads the same unquoted (folded to lower case, no keyword among reaper's).
_PLAIN = re.compile(r"[a-z_][a-z0-9_]*")


def quote_ident(part: str) -> str:
    """``part`` as a quoted SQL identifier: ``"part"``, each ``"`` doubled (never folded to
    lower case, as an unquoted name would be)."""
    return '"' + part.replace('"', '""') + '"'


def sql_name(part: str) -> str:
    """``part`` as SQL text for a statement shown to a person: bare where an unquoted name
    reads the same, else quoted (:func:`quote_ident`)."""
    return part if _PLAIN.fullmatch(part) else quote_ident(part)


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

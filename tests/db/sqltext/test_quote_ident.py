"""The names in the statements reaper shows (a check's fix) are quoted as the server's own
``quote_ident()`` quotes them: every keyword it quotes, every name that is not plain."""

from __future__ import annotations

from typing import Any

import psycopg

from reaper.sqltext.names import TableName, sql_name

NAMES = ["nodes", "Session", "expiresAt", "Sweep Ops", 'a"b', "_x1", "1abc", "é", "a-b", "x$y"]


def test_every_name_is_quoted_as_quote_ident_quotes_it(conn: psycopg.Connection[Any]) -> None:
    keywords = [
        w for (w,) in conn.execute("SELECT word FROM pg_get_keywords() WHERE catcode <> 'U'")
    ]
    unreserved = [
        w for (w,) in conn.execute("SELECT word FROM pg_get_keywords() WHERE catcode = 'U'")
    ]
    for name in [*NAMES, *keywords]:
        (server,) = conn.execute("SELECT quote_ident(%s)", (name,)).fetchone() or ("",)
        assert sql_name(name) == server, name
    # A word this server does not reserve may be reserved by a later release: quoted or not,
    # it names the same column.
    for name in unreserved:
        assert sql_name(name) in (name, f'"{name}"'), name


def test_a_table_is_quoted_part_by_part(conn: psycopg.Connection[Any]) -> None:
    for schema, name in (("auth", "Session"), ("public", "order"), ("My Schema", "t")):
        (server,) = conn.execute(
            "SELECT quote_ident(%s) || '.' || quote_ident(%s)", (schema, name)
        ).fetchone() or ("",)
        assert TableName(schema, name).sql_text == server

"""Every script reaper ships for a person to run, and every statement its pages show, calls
PostgreSQL's own code only: each function is named with its schema, and a script that finds
anything through the caller's search_path (an operator, a type, a table) pins that path to
pg_catalog first, in its own transaction. The names are read from the text itself with
pglast (tests/support/sqlnames.py), so a new call is covered as soon as it is written;
tests/db/project/test_sql_files.py runs the scripts among planted copies of each."""

from __future__ import annotations

import pytest

from reaper import sqltext
from tests.support import sqlnames
from tests.support.sqlnames import Snippet

# What the pages show of reaper's own statements (run in its pinned sessions), or as an
# illustration: (page, first line). Not for a person to run.
NOT_FOR_A_PERSON = {
    ("docs/audit.md", "WITH victims AS (...), gone AS (DELETE FROM ONLY ... RETURNING *),"),
    ("docs/commands.md", "SELECT count(*) FROM nodes"),
    ("docs/partitions.md", "SELECT count(*)"),
    ("docs/partitions.md", "ALTER TABLE parent DETACH PARTITION p CONCURRENTLY"),
    ("docs/partitions.md", "DROP TABLE p"),
}


def _for_a_person() -> list[Snippet]:
    return [
        s
        for s in sqlnames.scripts() + sqlnames.pages()
        if (s.where, s.text.strip().splitlines()[0]) not in NOT_FOR_A_PERSON
    ]


SNIPPETS = _for_a_person()


def _id(s: Snippet) -> str:
    return (
        f"{s.where}: {s.text.strip().splitlines()[-1][:40]}" if s.where.endswith(".md") else s.where
    )


def test_every_exception_is_still_shown() -> None:
    shown = {(s.where, s.text.strip().splitlines()[0]) for s in sqlnames.pages()}
    assert shown >= NOT_FOR_A_PERSON


@pytest.mark.parametrize("snippet", SNIPPETS, ids=_id)
def test_each_function_is_named_with_its_schema(snippet: Snippet) -> None:
    bare = sorted({n for s, n, _ in sqlnames.names(snippet.text).functions if s is None})
    assert bare == [], f"{snippet.where}: name {bare} with their schema (pg_catalog.{bare[0]})"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=_id)
def test_what_the_path_would_find_comes_after_the_pin(snippet: Snippet) -> None:
    found = sqlnames.names(snippet.text).through_the_path()
    if found:
        assert sqlnames.pins_first(snippet.text), (
            f"{snippet.where} finds {found} through the caller's search_path: open it with "
            "BEGIN; SET LOCAL search_path = pg_catalog, pg_temp; and end it with COMMIT"
        )


@pytest.mark.parametrize("name", sqlnames.SCRIPTS)
def test_each_script_pins_first_and_is_one_transaction(name: str) -> None:
    text = (sqlnames.ROOT / name).read_text("utf-8")
    assert sqlnames.pins_first(text)
    assert sqltext.strip_comments(text).rstrip().endswith("COMMIT;")


def test_reaper_runs_a_shipped_script_without_its_own_transaction() -> None:
    """``indexes ensure`` builds each index CONCURRENTLY, which no transaction may hold."""
    body = sqltext.body("indexes.sql")
    assert body and all(s.startswith("CREATE INDEX") for s in body)
    assert all(not s.startswith(("BEGIN", "SET", "COMMIT")) for s in sqltext.body("schema.sql"))


PAGE = """
Run this:

```sql
SELECT format('%I', name) FROM roles;
```

or, indented:

    psql -d control -c 'SELECT has_schema_privilege(current_user, $$s$$, $$USAGE$$)'

    DROP TABLE nodes;

and inline: `SELECT pg_catalog.now()`, `REVOKE CREATE ON SCHEMA public FROM PUBLIC`, not
`SELECT` alone nor `count(*)`.
"""


def test_the_reader_finds_each_kind_of_statement_on_a_page() -> None:
    texts = [s.text.strip() for s in sqlnames.page_snippets(PAGE, "page.md")]
    assert texts == [
        "SELECT format('%I', name) FROM roles;",
        "SELECT has_schema_privilege(current_user, $$s$$, $$USAGE$$)",
        "DROP TABLE nodes;",
        "SELECT pg_catalog.now()",
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
        "SELECT",
    ]


def test_the_reader_finds_each_kind_of_name_in_a_do_block() -> None:
    found = sqlnames.names(
        "DO $$ DECLARE s text := current_setting('x'); r regrole; BEGIN"
        " IF s = 'a' AND s IN ('b') AND s BETWEEN 'c' AND 'd' THEN"
        " EXECUTE format('GRANT %I', s); END IF;"
        " PERFORM 1 FROM pg_roles WHERE rolname = CASE s WHEN 'e' THEN 'f' END; END $$"
    )
    assert {n for s, n, _ in found.functions if s is None} == {"current_setting", "format"}
    assert {n for s, n in found.operators if s is None} == {"=", ">=", "<="}
    assert {n for s, n in found.types if s is None} >= {"text", "regrole"}
    assert found.relations == {(None, "pg_roles")}


def test_a_call_without_its_schema_is_caught() -> None:
    page = sqlnames.page_snippets(PAGE, "page.md")
    assert {n for s in page for sch, n, _ in sqlnames.names(s.text).functions if sch is None} == {
        "format",
        "has_schema_privilege",
    }
    assert not sqlnames.pins_first(page[0].text)

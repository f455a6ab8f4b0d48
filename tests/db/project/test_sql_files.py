"""The scripts a person runs with the rights of the tables' owner or of a superuser, run
among planted copies of every function and operator they use: no copy runs, and the role
that planted them gains nothing.

The attacker is a login with CREATE on ``public`` (every login, on a database created before
PostgreSQL 15) and a schema named after the caller, which ``"$user"`` puts first on the
caller's path. For each function a script names (read from the script with pglast,
tests/support/sqlnames.py, so a new call is covered as soon as it is written), it plants a
copy of each of PostgreSQL's signatures of that name and one taking text for each argument
count used; for each operator, a copy of each of PostgreSQL's. Each copy says it ran (a
WARNING), tries to make its author a superuser, a member of the caller and a reader of every
table, then does what the original does. The caller's search_path is hostile:
``"$user", public, pg_catalog``, so that an unpinned script would call the copies.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from reaper.dev.devserver import create_database, drop_database
from tests.support import TEST_ROLE_PASSWORD, sqlnames

# In the order a person runs them: the tables, their indexes, the example, the archive's
# schema (docs/audit.md), the role's grants.
AUDIT = next(
    s.text
    for s in sqlnames.pages()
    if s.where == "docs/audit.md" and "CREATE SCHEMA audit" in s.text
)
SCRIPTS = [
    ("sql/schema.sql", (sqlnames.ROOT / "sql/schema.sql").read_text("utf-8")),
    ("sql/indexes.sql", (sqlnames.ROOT / "sql/indexes.sql").read_text("utf-8")),
    ("examples/token-table.sql", (sqlnames.ROOT / "examples/token-table.sql").read_text("utf-8")),
    ("docs/audit.md", AUDIT),
    ("sql/grants.sql", (sqlnames.ROOT / "sql/grants.sql").read_text("utf-8")),
]
HOSTILE_PATH = '-c search_path="$user",public,pg_catalog'
RAN = "a planted copy ran"


@dataclass(frozen=True)
class Scene:
    """A database of its own, its attacker, and the caller who runs the scripts."""

    admin: str  # the database's DSN as a superuser
    attacker: str
    caller: str  # the DSN the scripts run as, its search_path hostile
    caller_role: str


def _role(dsn: str, name: str) -> str:
    return make_conninfo(dsn, user=name, password=TEST_ROLE_PASSWORD)


@pytest.fixture(params=["owner", "superuser"])
def scene(request: pytest.FixtureRequest, pg_server: str) -> Iterator[Scene]:
    tag = uuid.uuid4().hex[:8]
    attacker, owner = f"attacker_{tag}", f"owner_{tag}"
    admin = create_database(pg_server)
    try:
        yield _set(admin, attacker, owner, as_owner=request.param == "owner")
    finally:
        drop_database(admin)
        with psycopg.connect(pg_server, autocommit=True) as conn:
            for role in (attacker, owner):
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def _set(admin: str, attacker: str, owner: str, *, as_owner: bool) -> Scene:
    db = str(conninfo_to_dict(admin)["dbname"])
    with psycopg.connect(admin, autocommit=True) as conn:

        def run(template: str, *names: str) -> None:
            conn.execute(sql.SQL(template).format(*map(sql.Identifier, names)))

        for role in (attacker, owner):
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEROLE PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(TEST_ROLE_PASSWORD)
                )
            )
        # The role grants.sql grants to: an administrator's one-time step where the owner
        # may not create roles.
        conn.execute(
            "DO $$ BEGIN CREATE ROLE reaper LOGIN; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
        run("GRANT CREATE ON SCHEMA public TO PUBLIC")  # as before PostgreSQL 15
        run("GRANT CREATE ON DATABASE {} TO {}", db, owner)
        caller_role = owner if as_owner else str(conn.info.user)
        run("CREATE SCHEMA {} AUTHORIZATION {}", caller_role, attacker)  # the caller's "$user"
        run("GRANT USAGE ON SCHEMA {} TO PUBLIC", caller_role)
        run("CREATE SCHEMA {} AUTHORIZATION {}", attacker, attacker)
    caller = _role(admin, owner) if as_owner else admin
    return Scene(admin, attacker, make_conninfo(caller, options=HOSTILE_PATH), caller_role)


def _used() -> tuple[dict[str, set[int]], set[str]]:
    """The functions the scripts name (with the argument counts used) and the operators."""
    functions: dict[str, set[int]] = {}
    operators: set[str] = set()
    for _, text in SCRIPTS:
        found = sqlnames.names(text)
        for _, name, n in found.functions:
            functions.setdefault(name, set()).add(n)
        operators |= {name for _, name in found.operators}
    return functions, operators


# What every copy does first: say so, and try to take the caller's rights.
STRIKE = """
CREATE FUNCTION {me}.strike(what text) RETURNS void LANGUAGE plpgsql AS $strike$
BEGIN
  RAISE WARNING '%: % as %', {ran}, what, current_user;
  BEGIN EXECUTE pg_catalog.format('ALTER ROLE %I SUPERUSER', {me_text});
  EXCEPTION WHEN OTHERS THEN NULL; END;
  BEGIN EXECUTE pg_catalog.format('GRANT %I TO %I', current_user, {me_text});
  EXCEPTION WHEN OTHERS THEN NULL; END;
  BEGIN EXECUTE pg_catalog.format('GRANT SELECT ON ALL TABLES IN SCHEMA public TO %I', {me_text});
  EXCEPTION WHEN OTHERS THEN NULL; END;
END $strike$;
GRANT USAGE ON SCHEMA {me} TO PUBLIC;
"""

SIGNATURES = """
SELECT p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid), p.pronargs,
       p.provariadic <> 0, p.proretset, p.prorettype = 'void'::regtype
FROM pg_proc AS p
WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.prokind = 'f' AND p.proname = ANY(%s)
"""
OPERATORS = """
SELECT o.oprname, o.oprleft::regtype::text, o.oprright::regtype::text,
       o.oprresult::regtype::text, p.proname
FROM pg_operator AS o JOIN pg_proc AS p ON p.oid = o.oprcode
WHERE o.oprnamespace = 'pg_catalog'::regnamespace AND o.oprleft <> 0 AND o.oprname = ANY(%s)
"""


def _plant(scene: Scene) -> int:
    """The copies, in public and in the caller's schema; how many PostgreSQL took (it
    refuses a pseudo-type that a PL/pgSQL function cannot take, and a signature made
    already)."""
    functions, operators = _used()
    made = 0
    with psycopg.connect(_role(scene.admin, scene.attacker), autocommit=True) as conn:

        def q(name: str) -> str:
            return sql.Identifier(name).as_string(conn)

        def lit(text: str) -> str:
            return sql.Literal(text).as_string(conn)

        me = q(scene.attacker)
        conn.execute(STRIKE.format(me=me, me_text=lit(scene.attacker), ran=lit(RAN)))  # type: ignore[arg-type]

        def create(statement: str) -> int:
            try:
                conn.execute(statement)  # type: ignore[arg-type]
            except psycopg.Error:
                return 0
            return 1

        def copy(schema: str, name: str, args: str, result: str, then: str, label: str) -> int:
            return create(
                f"CREATE FUNCTION {schema}.{q(name)}({args}) RETURNS {result}"
                f" LANGUAGE plpgsql AS $copy$ BEGIN PERFORM {me}.strike({lit(label)}); {then}"
                " END $copy$"
            )

        signatures = conn.execute(SIGNATURES, (list(functions),)).fetchall()
        originals = conn.execute(OPERATORS, (list(operators),)).fetchall()
        for schema in (q("public"), q(scene.caller_role)):
            for name, args, result, n, variadic, setof, void in signatures:
                params = [f"${i}" for i in range(1, n + 1)]
                if variadic:
                    params[-1] = "VARIADIC " + params[-1]
                call = f"pg_catalog.{q(name)}({', '.join(params)})"
                then = f"RETURN QUERY SELECT * FROM {call};" if setof else f"RETURN {call};"
                if void and not setof:
                    then = f"PERFORM {call}; RETURN;"
                made += copy(schema, name, args, result, then, f"{schema}.{name}({args})")
            for name, counts in functions.items():
                for n in counts:
                    args = ", ".join(["text"] * n)
                    made += copy(
                        schema, name, args, "text", "RETURN NULL;", f"{schema}.{name}({args})"
                    )
            for i, (op, left, right, result, code) in enumerate(originals):
                label = f"{schema}.{op}({left}, {right})"
                then = f"RETURN pg_catalog.{q(code)}($1, $2);"
                if copy(schema, f"op_{i}", f"{left}, {right}", result, then, label):
                    made += create(
                        f"CREATE OPERATOR {schema}.{op} (LEFTARG = {left}, RIGHTARG = {right},"
                        f" FUNCTION = {schema}.{q(f'op_{i}')})"
                    )
    return made


def _warnings(conn: psycopg.Connection[Any]) -> list[str]:
    said: list[str] = []
    conn.add_notice_handler(lambda d: said.append(str(d.message_primary)))
    return said


def _holds(scene: Scene) -> dict[str, Any]:
    """What the attacker holds: superuser, membership of the caller, tables it may read."""
    with psycopg.connect(scene.admin, autocommit=True) as conn:
        row = conn.execute(
            "SELECT r.rolsuper, pg_has_role(r.oid, %s, 'MEMBER'),"
            " (SELECT pg_catalog.array_agg(c.oid::regclass::text ORDER BY 1) FROM pg_class AS c"
            "   WHERE c.relkind IN ('r', 'p') AND c.relnamespace NOT IN"
            "     ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)"
            "   AND has_table_privilege(r.oid, c.oid, 'SELECT'))"
            " FROM pg_roles AS r WHERE r.rolname = %s",
            (scene.caller_role, scene.attacker),
        ).fetchone()
    assert row is not None
    return {"superuser": row[0], "member of the caller": row[1], "reads": row[2]}


def test_the_copies_bind_where_a_statement_does_not_pin_its_path(scene: Scene) -> None:
    """The scene itself: without the pin, an unqualified call or comparison runs a copy."""
    assert _plant(scene) > 100
    with psycopg.connect(scene.caller, autocommit=True) as conn:
        said = _warnings(conn)
        conn.execute("SELECT format('%s', 'x'), now(), 'a'::text = 'b'::text")
    ran = {w.split(": ", 1)[1].split(" as ")[0] for w in said if w.startswith(RAN)}
    assert any(w.endswith(".format(text, text)") for w in ran), said
    assert any(".now()" in w for w in ran) and any(".=(text, text)" in w for w in ran), said


def test_no_copy_runs_and_nothing_changes_hands(scene: Scene) -> None:
    assert _plant(scene) > 100
    before = _holds(scene)
    assert before == {"superuser": False, "member of the caller": False, "reads": None}
    with psycopg.connect(scene.caller, autocommit=True) as conn:
        said = _warnings(conn)
        for where, text in SCRIPTS:
            conn.execute(text)  # type: ignore[arg-type]
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE, where
    assert [w for w in said if w.startswith(RAN)] == []
    assert _holds(scene) == before
    # Each script did its work: the tables, the example's, the archive, reaper's grants.
    with psycopg.connect(scene.admin, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT pg_catalog.array_agg(c.oid::regclass::text ORDER BY 1) FROM pg_class AS c"
            " WHERE c.relkind = 'r' AND c.relnamespace IN ('public'::regnamespace,"
            " 'audit'::regnamespace) AND has_table_privilege('reaper', c.oid, 'DELETE')"
        ).fetchone()
    assert tables is not None and set(tables[0]) == {
        "audit.enrollment_requests_archive",
        "bootstrap_tokens",
        "enrollment_requests",
        "nodes",
        "routers",
    }

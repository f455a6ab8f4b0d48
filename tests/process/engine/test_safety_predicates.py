"""A declared predicate can only delete by age and can run no code.

Against a real PostgreSQL: a predicate with a branch true regardless of age is refused at
load (exit 2, one line naming the part); a predicate that names a function, operator, type or
relation that could run code is refused by the server's catalog before any statement
evaluates it, in run-once, --dry-run, status, check and the daemon's gauges; the function never
runs (its side effect is asserted absent) and every row stays.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import keys, run_reaper
from tests.support.ops import apply_grants

# Every test here declares tables or functions of its own: a database of its own each.
pytestmark = pytest.mark.fresh_db

OLD = "now() - interval '90 days'"


def _seed(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO nodes (peer_id, enrolled_at, expires_at, banned) VALUES"
        f" ('garbage-old', {OLD}, NULL, false),"
        f" ('keep-old-banned', {OLD}, NULL, true),"
        " ('keep-young', now() - interval '1 day', NULL, false),"
        " ('keep-young-banned', now() - interval '1 day', NULL, true)"
    )


def _config(tmp_path: Path, predicate: str, extra: str = "") -> Path:
    path = tmp_path / f"reaper-{uuid.uuid4().hex[:6]}.toml"
    escaped = predicate.replace("\\", "\\\\").replace('"', '\\"')
    path.write_text(
        "[sweeps.members]\n"
        'table = "nodes"\n'
        'reason = "stale"\n'
        f'predicate = "{escaped}"\n'
        'retention = "30d"\n' + extra
    )
    return path


ALL_NODES = {"garbage-old", "keep-old-banned", "keep-young", "keep-young-banned"}


# -- the rule, from the parse tree -------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicate", "part"),
    [
        ("enrolled_at < %(cutoff)s OR true", "`TRUE` is not bounded"),
        ("%(cutoff)s IS NOT NULL", "%(cutoff)s IS NOT NULL"),
    ],
)
def test_o01_cli_refuses_an_unbounded_predicate(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, predicate: str, part: str
) -> None:
    """O01: `OR true` and `%(cutoff)s IS NOT NULL` are refused, exit 2, one line; every row
    (banned members included) stays, dry run or not."""
    _seed(conn)
    config = _config(tmp_path, predicate)
    for args in (("run-once",), ("run-once", "--dry-run"), ("status",), ("check",)):
        run = run_reaper(*args, "--config", str(config), env={"REAPER_DSN": dsn})
        assert run.code == 2, (args, run.stderr)
        assert len(run.stderr_lines) == 1, run.stderr
        assert "[sweeps.members] predicate" in run.stderr and part in run.stderr
    assert keys(conn, "nodes") == ALL_NODES


# -- the allow-list, from the server's catalog -----------------------------------------------

SETUP = """
CREATE TABLE secrets (id int PRIMARY KEY);
INSERT INTO secrets SELECT generate_series(1, 10);
CREATE TABLE side_effects (what text);
-- Owned by the superuser that runs the tests; EXECUTE is PUBLIC's by default.
CREATE FUNCTION public.innocent(peer text) RETURNS boolean SECURITY DEFINER
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM secrets;
    INSERT INTO side_effects VALUES ('innocent ran');
    RETURN false;
END $$;
CREATE FUNCTION public.is_old(ts timestamptz) RETURNS timestamptz STABLE
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO side_effects VALUES ('is_old ran');
    RETURN ts;
END $$;
CREATE FUNCTION public.noisy_eq(a text, b text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO side_effects VALUES ('noisy_eq ran');
    RETURN a = b;
END $$;
CREATE OPERATOR public.=== (FUNCTION = public.noisy_eq, LEFTARG = text, RIGHTARG = text);
CREATE FUNCTION public.upper(text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO side_effects VALUES ('shadowing upper ran');
    RETURN pg_catalog.upper($1);
END $$;
CREATE FUNCTION public.check_peer(text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO side_effects VALUES ('domain check ran');
    RETURN true;
END $$;
CREATE DOMAIN public.peer AS text CHECK (public.check_peer(VALUE));
CREATE VIEW public.banned_peers AS SELECT peer_id FROM nodes WHERE banned AND innocent(peer_id);
"""

REFUSED_BY_CATALOG = [
    # (predicate, the object the message names)
    ("enrolled_at < %(cutoff)s AND NOT innocent(peer_id)", "function innocent(text)"),
    ("enrolled_at < %(cutoff)s AND NOT public.innocent(peer_id)", "public.innocent"),
    ("enrolled_at < %(cutoff)s AND is_old(enrolled_at) < now()",
     "function is_old(timestamp with time zone)"),
    ("enrolled_at < %(cutoff)s AND peer_id === 'garbage-old'", "operator ===(text,text)"),
    ("enrolled_at < %(cutoff)s AND upper(peer_id) <> ''", "function public.upper(text)"),
    ("enrolled_at < %(cutoff)s AND peer_id::peer IS NOT NULL", "type peer"),
    ("enrolled_at < %(cutoff)s AND random() < 2", "is volatile"),
    ("enrolled_at < %(cutoff)s AND clock_timestamp() > enrolled_at",
     "function clock_timestamp(), which is volatile"),
    ("enrolled_at < %(cutoff)s AND peer_id NOT IN (SELECT peer_id FROM banned_peers)",
     "relation \"banned_peers\""),
]


@pytest.fixture
def armed(conn: psycopg.Connection[Any]) -> None:
    _seed(conn)
    conn.execute(SETUP)


def _untouched(conn: psycopg.Connection[Any]) -> None:
    assert [r[0] for r in conn.execute("SELECT what FROM side_effects")] == []
    assert conn.execute("SELECT count(*) FROM secrets").fetchone() == (10,)
    assert keys(conn, "nodes") == ALL_NODES


@pytest.mark.usefixtures("armed")
@pytest.mark.parametrize(("predicate", "named"), REFUSED_BY_CATALOG)
def test_functions_outside_the_allow_list_are_refused_before_any_evaluation(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, predicate: str, named: str
) -> None:
    config = _config(tmp_path, predicate)
    commands: tuple[tuple[str, ...], ...] = (("run-once", "--dry-run"), ("run-once",))
    if predicate == REFUSED_BY_CATALOG[0][0]:
        commands += (("status",), ("check",))
    for args in commands:
        run = run_reaper(*args, "--config", str(config), env={"REAPER_DSN": dsn})
        assert run.code == 2, (args, run.code, run.stderr)
        assert len(run.stderr_lines) == 1, run.stderr
        assert "[sweeps.members] predicate" in run.stderr, run.stderr
        assert named in run.stderr, run.stderr
    _untouched(conn)


@pytest.mark.usefixtures("armed")
def test_security_definer_dry_run_as_the_least_privileged_role(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """The repro: a SECURITY DEFINER function in a predicate, `run-once --dry-run` as the
    role of grants.sql (which cannot even read `secrets`): refused, and `secrets` is whole."""
    reaper_dsn = apply_grants(dsn)
    assert conn.execute("SELECT has_table_privilege('reaper', 'secrets', 'SELECT')").fetchone() \
        == (False,)
    config = _config(tmp_path, "enrolled_at < %(cutoff)s AND NOT innocent(peer_id)")
    run = run_reaper(
        "run-once", "--dry-run", "--config", str(config), env={"REAPER_DSN": reaper_dsn}
    )
    assert run.code == 2, run.stderr
    assert "function innocent(text)" in run.stderr and "SECURITY DEFINER" in run.stderr
    _untouched(conn)


def test_allowed_builtins_run(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """Built-in stable and immutable functions, casts to built-in types, LIKE, IN, and a
    subquery over a table are allowed, and the sweep deletes exactly the old unbanned row."""
    _seed(conn)
    predicate = (
        "enrolled_at < %(cutoff)s AND date_trunc('hour', enrolled_at) < now()"
        " AND lower(peer_id) LIKE 'garbage-%%'"
        " AND peer_id NOT IN (SELECT peer_id FROM nodes n WHERE n.banned)"
        " AND length(peer_id::text) > 0 AND extract(epoch FROM enrolled_at) > 0"
    )
    config = _config(tmp_path, predicate)
    dry = run_reaper("run-once", "--dry-run", "--json", "--sweep", "members",
                     "--config", str(config), env={"REAPER_DSN": dsn})
    assert dry.code == 0, dry.stderr
    assert dry.json()[0]["rows"] == 1
    run = run_reaper("run-once", "--sweep", "members", "--config", str(config),
                     env={"REAPER_DSN": dsn})
    assert run.code == 0, run.stderr
    assert keys(conn, "nodes") == ALL_NODES - {"garbage-old"}


@pytest.mark.usefixtures("armed")
def test_the_daemon_refuses_to_start(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """`reaper run` checks every predicate against the catalog before its first run: exit 2."""
    config = _config(tmp_path, "enrolled_at < %(cutoff)s AND NOT innocent(peer_id)")
    run = run_reaper(
        "run", "--config", str(config), "--listen", "127.0.0.1:0",
        env={"REAPER_DSN": dsn}, timeout=60,
    )
    assert run.code == 2, run.stderr
    assert "function innocent(text)" in run.stderr
    _untouched(conn)


# -- user types, casts and extensions --------------------------------------------------------

USER_TYPES = """
CREATE TABLE cast_effects (what text);
CREATE TYPE wrap AS (t timestamptz);
CREATE FUNCTION wrap_ts(wrap) RETURNS timestamptz VOLATILE LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cast_effects VALUES ('wrap_ts ran');
    RETURN '-infinity';
END $$;
CREATE CAST (wrap AS timestamptz) WITH FUNCTION wrap_ts(wrap) AS IMPLICIT;
CREATE FUNCTION stamp_check(timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cast_effects VALUES ('domain check ran');
    RETURN true;
END $$;
CREATE DOMAIN stamp AS timestamptz CHECK (stamp_check(VALUE));
CREATE TABLE w (id int PRIMARY KEY, c wrap, created_at timestamptz, d stamp);
INSERT INTO w SELECT i, ROW(now() - interval '1 day')::wrap, now() - interval '1 day',
                     now() - interval '1 day'
FROM generate_series(1, 20) i;
TRUNCATE cast_effects;  -- the domain CHECK ran for each row inserted
"""

USER_TYPE_PREDICATES = [
    # (predicate, the part the message names)
    ("c < %(cutoff)s", "column w.c, which is of type wrap"),
    ("c::timestamptz < %(cutoff)s", "can shift a row's age"),
    ("created_at < %(cutoff)s AND c < now()", "column w.c, which is of type wrap"),
    ("created_at < %(cutoff)s AND c::timestamptz < now()", "column w.c"),
    ("created_at < %(cutoff)s AND (c).t < now()", "column w.c"),
    ("created_at < %(cutoff)s AND d < now()", "column w.d, which is of type stamp"),
    ("created_at < %(cutoff)s AND w IS NOT NULL", "column w.c"),
    ("created_at < %(cutoff)s AND w::text <> ''", "column w.c"),
    ("created_at < %(cutoff)s AND EXISTS (SELECT FROM w w2 WHERE w2.c < now())", "column w.c"),
    ("created_at < %(cutoff)s AND EXISTS (SELECT * FROM w w2 WHERE w2.id = w.id)",
     "column w.c"),
    ("created_at < %(cutoff)s AND created_at::stamp IS NOT NULL", "type stamp"),
]


def _config_on(tmp_path: Path, table: str, predicate: str) -> Path:
    path = tmp_path / f"reaper-{uuid.uuid4().hex[:6]}.toml"
    escaped = predicate.replace("\\", "\\\\").replace('"', '\\"')
    path.write_text(
        f'[sweeps.members]\ntable = "{table}"\nreason = "stale"\n'
        f'predicate = "{escaped}"\nretention = "30d"\nmax_eligible_fraction = 1\n'
    )
    return path


def _refused_everywhere(dsn: str, config: Path, named: str) -> None:
    for args in (("run-once", "--dry-run"), ("run-once",)):
        run = run_reaper(*args, "--sweep", "members", "--config", str(config),
                         env={"REAPER_DSN": dsn})
        assert run.code == 2, (args, run.code, run.stderr)
        assert len(run.stderr_lines) == 1, run.stderr
        assert "[sweeps.members] predicate" in run.stderr and named in run.stderr, run.stderr


@pytest.mark.parametrize(("predicate", "named"), USER_TYPE_PREDICATES)
def test_columns_of_user_types_are_refused_and_no_cast_runs(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, predicate: str, named: str
) -> None:
    """A column of a user type (a composite with an implicit user cast, a domain whose CHECK
    calls user code) is refused before any statement reads it: the cast never runs."""
    conn.execute(USER_TYPES)
    _refused_everywhere(dsn, _config_on(tmp_path, "w", predicate), named)
    assert conn.execute("SELECT count(*) FROM cast_effects").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM w").fetchone() == (20,)


def test_a_user_cast_between_built_in_types_is_refused(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """A cast whose function is not built in, between types a built-in value has, applies
    without being written: every predicate is refused while it exists."""
    _seed(conn)
    conn.execute(
        "CREATE TABLE cast_effects (what text);"
        "CREATE FUNCTION int_ts(int) RETURNS timestamptz VOLATILE LANGUAGE plpgsql AS $$"
        " BEGIN INSERT INTO cast_effects VALUES ('int_ts ran'); RETURN '-infinity'; END $$;"
        "CREATE CAST (int AS timestamptz) WITH FUNCTION int_ts(int) AS IMPLICIT;"
    )
    config = _config_on(tmp_path, "nodes", "enrolled_at < %(cutoff)s AND NOT banned")
    _refused_everywhere(dsn, config, "cast (integer AS timestamp with time zone)")
    assert conn.execute("SELECT count(*) FROM cast_effects").fetchone() == (0,)
    assert keys(conn, "nodes") == ALL_NODES


def _citext(conn: psycopg.Connection[Any]) -> None:
    try:
        conn.execute("CREATE EXTENSION citext SCHEMA public")
    except psycopg.Error as exc:
        pytest.skip(f"citext is not available: {exc}")


def test_an_extension_on_user_types_does_not_refuse_built_in_names(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """citext in public adds operators =, <, ... and functions strpos, replace, ... on
    citext: no built-in operand can take them, so they do not refuse a predicate."""
    _citext(conn)
    _seed(conn)
    predicate = (
        "enrolled_at < %(cutoff)s AND NOT banned AND strpos(peer_id, 'old') > 0"
        " AND replace(peer_id, 'x', 'y') <> ''"
    )
    config = _config_on(tmp_path, "nodes", predicate)
    run = run_reaper("run-once", "--config", str(config), "--sweep", "members",
                     env={"REAPER_DSN": dsn})
    assert run.code == 0, run.stderr
    assert keys(conn, "nodes") == ALL_NODES - {"garbage-old"}


@pytest.mark.parametrize(
    ("setup", "predicate", "named"),
    [
        ("CREATE OPERATOR public.< (FUNCTION = ts_lt, LEFTARG = timestamptz,"
         " RIGHTARG = timestamptz)", "enrolled_at < %(cutoff)s",
         "<(timestamp with time zone,timestamp with time zone), which is not built"),
        ("CREATE OPERATOR public.< (FUNCTION = ts_lt_any, LEFTARG = anyelement,"
         " RIGHTARG = anyelement)", "enrolled_at < %(cutoff)s",
         "operator <(anyelement,anyelement), which is not built in"),
        ("CREATE FUNCTION public.strpos(text, text) RETURNS int LANGUAGE sql"
         " AS 'SELECT 1'", "enrolled_at < %(cutoff)s AND strpos(peer_id, 'o') > 0",
         "strpos(text,text), which is not built in"),
        ("CREATE DOMAIN peer_name AS text;"
         " CREATE FUNCTION peer_eq(peer_name[], peer_name[]) RETURNS boolean LANGUAGE sql"
         " AS 'SELECT true';"
         " CREATE OPERATOR public.@> (FUNCTION = peer_eq, LEFTARG = peer_name[],"
         " RIGHTARG = peer_name[])",
         "enrolled_at < %(cutoff)s AND ARRAY[peer_id] @> ARRAY['x']",
         "@>(peer_name[],peer_name[]), which is not built in"),
    ],
)
def test_a_user_operator_or_function_on_built_in_types_is_still_refused(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, setup: str, predicate: str,
    named: str,
) -> None:
    _citext(conn)
    _seed(conn)
    conn.execute(
        "CREATE FUNCTION ts_lt(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql"
        " AS 'SELECT true';"
        "CREATE FUNCTION ts_lt_any(anyelement, anyelement) RETURNS boolean LANGUAGE sql"
        " AS 'SELECT true';"
    )
    conn.execute(setup)
    config = _config_on(tmp_path, "nodes", predicate)
    _refused_everywhere(dsn, config, named)
    assert keys(conn, "nodes") == ALL_NODES

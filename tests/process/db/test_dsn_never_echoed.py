"""No password is ever printed, whatever the DSN looks like and wherever it came from.

The real ``reaper`` command, in a subprocess, against the test server: passwords of every
awkward shape, in a URI as given, in a URI percent-encoded and in ``key=value`` words, from
the flag, from REAPER_DSN, from the TOML file and from the flag put before the command, to
several commands, at ``--log-level debug`` in both log formats. Every byte of stdout and
stderr is searched for the password and its percent-encoded forms. The server trusts its
TCP logins, so it takes any password: the commands run for real.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from reaper import errors
from reaper.db import describe_dsn, parse_dsn
from tests.support import run_reaper
from tests.support.daemon import free_port, http_get, start_reaper, wait_for

# Each is distinctive enough that finding it in the output means it leaked.
PASSWORDS = [
    "Gen3rated/Base64+Pw==",  # the repro: an unencoded '/'
    "p@ss@w0rd-Kq",  # '@' twice
    "co:lo:n-Zx",  # ':'
    "what?ever#frag-Vb",  # '?' and '#'
    "100%sure%zz-Qp",  # '%', not an escape
    'It\'s-a"quote"-Mn',  # quotes
    "two words here-Jh",  # spaces
    "back\\slash;semi&amp=eq-Rt",  # backslash, ';', '&', '='
    "üñîçødé-пароль-密码",  # unicode
    "Ω",  # 1 character
    "@/",  # 2 characters, both awkward
    "/@:?#%'\" ",  # every awkward character at once
    "Zq" * 100,  # 200 characters
    "tr4iling-space-Lk ",  # trailing space
]


def _kv_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _dsns(user: str, password: str, dbname: str) -> dict[str, str]:
    """The password in each form a user may write it."""
    return {
        "uri": f"postgresql://{user}:{password}@127.0.0.1:5432/{dbname}",
        "uri_encoded": f"postgresql://{user}:{quote(password, safe='')}@127.0.0.1:5432/{dbname}",
        "words": f"host=127.0.0.1 port=5432 dbname={dbname} user={user} "
        f"password={_kv_quote(password)}",
    }


def _forms(password: str) -> set[str]:
    """What counts as the password in the output."""
    found = {
        password,
        quote(password, safe=""),
        quote(password),
        quote_plus(password),
        password.encode("unicode_escape").decode("ascii"),
        _kv_quote(password),
    }
    # JSON escapes non-ASCII and quotes; a fragment of a long one counts too.
    found.add(json.dumps(password)[1:-1])
    if len(password) >= 16:
        found.add(password[2:14])
    return {f for f in found if f.strip()}


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


COMMANDS = [["run-once"], ["status"], ["check"]]
SOURCES = ["flag", "env", "toml", "flag_before_command"]


def _invoke(
    dsn: str, source: str, command: list[str], log_format: str, tmp: Path
) -> tuple[list[str], Any]:
    head = ["--log-level", "debug", "--log-format", log_format]
    env: dict[str, str] = {}
    if source == "flag":
        args = [*head, *command, "--dsn", dsn]
    elif source == "flag_before_command":
        args = [*head, "--dsn", dsn, *command]
    elif source == "env":
        args = [*head, *command]
        env["REAPER_DSN"] = dsn
    else:
        path = tmp / f"reaper-{uuid.uuid4().hex[:8]}.toml"
        path.write_text(f"dsn = {_toml_string(dsn)}\n", encoding="utf-8")
        args = [*head, *command, "--config", str(path)]
    return args, run_reaper(*args, env=env, timeout=90)


@pytest.fixture
def login(dsn: str) -> Iterator[tuple[str, str]]:
    """A role that logs in with a password (the server trusts TCP logins: any password is
    taken), and the fresh database's name."""
    role = f"reaper_pw_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
                sql.Identifier(role), sql.Literal("not-the-one-in-the-dsn")
            )
        )
    try:
        yield role, str(conninfo_to_dict(dsn)["dbname"])
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = {}"
                ).format(sql.Literal(role))
            )
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def _assert_not_shown(password: str, args: list[str], run: Any) -> None:
    text = run.stdout + run.stderr
    for form in _forms(password):
        assert form not in text, (
            f"password {password!r} shown as {form!r}; reaper {args[:6]}...: {text[-2000:]}"
        )


def test_the_reported_shapes_are_never_shown(login: tuple[str, str], tmp_path: Path) -> None:
    """A URI whose password holds an unencoded '/' or '@' (libpq would read part of it as the
    host, the port or the database): refused at once, without its text; the option before the
    command: the hint names the option, never its value."""
    user, dbname = login
    for password in ("Gen3rated/Base64+Pw==", "p@ss@w0rd-Kq"):
        dsn = f"postgresql://{user}:{password}@127.0.0.1:5432/{dbname}"
        args, run = _invoke(dsn, "flag", ["status"], "json", tmp_path)
        assert run.code == 2, run.stderr
        assert "the DSN (not shown) does not parse" in run.stderr
        _assert_not_shown(password, args, run)
    dsn = f"postgresql://{user}:secret-Ab9@127.0.0.1:5432/{dbname}"
    args, run = _invoke(dsn, "flag_before_command", ["status"], "console", tmp_path)
    assert run.code == 2 and "--dsn goes after the command" in run.stderr, run.stderr
    assert "--dsn DSN'" in run.stderr
    _assert_not_shown("secret-Ab9", args, run)


@pytest.mark.slow
def test_no_password_of_any_shape_is_shown(login: tuple[str, str], tmp_path: Path) -> None:
    user, dbname = login
    cases = []
    # Each password in each form once, the source, command and log format taken in turn, so
    # that every password goes through three sources and every source sees every shape.
    rotation = itertools.cycle(
        (source, command, log_format)
        for command, log_format, source in itertools.product(COMMANDS, ["json", "console"], SOURCES)
    )
    for password in PASSWORDS:
        for form, dsn in _dsns(user, password, dbname).items():
            source, command, log_format = next(rotation)
            cases.append((password, form, dsn, source, command, log_format))

    def one(case: tuple[str, str, str, str, list[str], str]) -> tuple[str, str, int]:
        password, form, dsn, source, command, log_format = case
        args, run = _invoke(dsn, source, command, log_format, tmp_path)
        _assert_not_shown(password, args, run)
        assert "Traceback" not in run.stderr, run.stderr
        return form, source, run.code

    with ThreadPoolExecutor(max_workers=3) as pool:
        codes = list(pool.map(one, cases))
    # The commands really ran: every percent-encoded URI connects (exit 0 or a finding, 1),
    # so the password went through the whole run, logs included.
    assert {
        code
        for form, source, code in codes
        if form == "uri_encoded" and source != "flag_before_command"
    } <= {0, 1}
    assert len(codes) == len(PASSWORDS) * 3
    assert {source for _, source, _ in codes} == set(SOURCES)


def test_readyz_names_the_target_never_the_dsn(tmp_path: Path) -> None:
    """A daemon that cannot connect: its unauthenticated readiness answer names the class of
    the reason alone, and its log names user, host, port and database, never the password."""
    password = "Gen3rated%2FBase64+Pw=="  # percent-encoded: a valid URI
    port = free_port()
    closed = free_port()
    dsn = f"postgresql://reaper:{password}@127.0.0.1:{closed}/control?connect_timeout=1"
    proc = start_reaper(
        ["--log-level", "debug", "run", "--listen", f"127.0.0.1:{port}", "--dsn", dsn], tmp_path
    )
    try:
        code, body = wait_for("a readiness answer", lambda: _answer(port))
        assert code == 503
        # Anyone reads the class of the reason; the log names the target, never the DSN.
        assert "database unreachable" in body and "127.0.0.1" not in body
        for form in (*_forms(password), *_forms("Gen3rated/Base64+Pw==")):
            assert form not in body
    finally:
        proc.terminate()
    log = proc.log_path.read_text()
    assert f"reaper@127.0.0.1:{closed}/control" in log
    for form in (*_forms(password), *_forms("Gen3rated/Base64+Pw==")):
        assert form not in log


def _answer(port: int) -> tuple[int, str] | None:
    try:
        code, body = http_get(port, "/readyz")
    except OSError:
        return None
    return (code, body) if code == 503 and "unreachable" in body else None


@pytest.mark.parametrize("password", PASSWORDS)
def test_describe_never_shows_the_password(password: str) -> None:
    for dsn in _dsns("u", password, "db").values():
        try:
            described = describe_target_of(dsn)
        except errors.ConfigError as exc:
            described = str(exc)
        for form in _forms(password):
            assert form not in described, (dsn, described)


def describe_target_of(dsn: str) -> str:
    parse_dsn(dsn)  # raises ConfigError for what does not parse
    return describe_dsn(dsn)

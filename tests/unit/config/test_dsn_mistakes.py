"""The mistakes a new user makes in a DSN: each is exit 2 and one line that names where the DSN
came from and what is wrong, never quoting it. Found before any connection, so that no
message of libpq's (which quotes the text) and no failed connection (exit 1) stands for them:
a port that is not a number (or a password that a misplaced ':' made the port), a misspelt or
misshapen URI scheme, an address or a mode that no connection can use, and a DSN given empty."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reaper.cli import main
from reaper.db import parse_dsn
from reaper.errors import ConfigError

SECRET = "Zq7secret"

# (DSN, words the line must hold): each a member of the family, the password in it where
# it could leak.
MISTAKES = [
    (f"postgresql://reaper:{SECRET}@db.internal:54x2/control", "port is not a number"),
    (f"postgresql://reaper:{SECRET}/control", "port is not a number"),
    (f"postgresql://reaper@db.internal:{SECRET}/control", "port is not a number"),
    ("postgresql://reaper@db.internal:0/control", "port is not a number"),
    ("postgresql://reaper@db.internal:70000/control", "port is not a number"),
    ("postgresql://reaper@a:5432,b:54x3/control", "port is not a number"),
    (f"host=db port=5432x password={SECRET}", "port is not a number"),
    (f"postgresq://reaper:{SECRET}@db/control", "scheme is not postgresql://"),
    (f"postgressql://reaper:{SECRET}@db/control", "scheme is not postgresql://"),
    (f"psql://reaper:{SECRET}@db/control", "scheme is not postgresql://"),
    (f"POSTGRESQL://reaper:{SECRET}@db/control", "not in lower case"),
    (f"jdbc:postgresql://db/control?password={SECRET}", "JDBC"),
    (f"postgres:/reaper:{SECRET}@db/control", "does not begin with postgresql://"),
    (f"postgresql:reaper:{SECRET}@db/control", "does not begin with postgresql://"),
    (f"postgresql//reaper:{SECRET}@db/control", "does not begin with postgresql://"),
    (f"hostaddr=db.internal password={SECRET}", "hostaddr is not an IP address"),
    (f"host=db sslmode=verify_full password={SECRET}", "sslmode is none of"),
    (f"postgresql://reaper:{SECRET}@db/control?sslmode=requre", "sslmode is none of"),
    (f"host=db target_session_attrs=primary-only password={SECRET}", "target_session_attrs"),
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith(("REAPER_", "PG")):
            monkeypatch.delenv(k)


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert exc.value.code == 2, err
    assert len(lines) == 1 and lines[0].startswith("reaper: "), err
    assert out == ""
    return lines[0]


@pytest.mark.parametrize(("dsn", "words"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_dsn_mistake_is_exit_2_and_one_line_without_the_dsn(
    dsn: str, words: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_line(capsys, ["status", "--dsn", dsn])
    assert line.startswith("reaper: --dsn: the DSN (not shown) does not parse: "), line
    assert words in line, line
    assert SECRET not in line and "db.internal" not in line and "54x" not in line, line
    monkeypatch.setenv("REAPER_DSN", dsn)
    line = _one_line(capsys, ["check"])
    assert line.startswith("reaper: REAPER_DSN: the DSN (not shown)") and SECRET not in line


@pytest.mark.parametrize("dsn", ["", " ", "   "], ids=repr)
def test_an_empty_dsn_is_refused_from_every_source(
    dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Given empty, a DSN was meant to be set: refused, not read as "unset" (which would reach
    whatever libpq's defaults name)."""
    line = _one_line(capsys, ["run-once", "--dry-run", "--dsn", dsn])
    assert line.startswith("reaper: --dsn: is empty") and "unset" in line, line
    monkeypatch.setenv("REAPER_DSN", dsn)
    line = _one_line(capsys, ["run-once", "--dry-run"])
    assert line.startswith("reaper: REAPER_DSN: is empty"), line
    monkeypatch.delenv("REAPER_DSN")
    config = tmp_path / "reaper.toml"
    config.write_text(f'dsn = "{dsn}"\n')
    line = _one_line(capsys, ["run-once", "--dry-run", "--config", str(config)])
    assert f"{config} key dsn: is empty" in line, line


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://reaper@db.internal:5432/control",
        "postgres://reaper@db.internal/control?sslmode=verify-full",
        "postgresql://reaper@a:5432,b:5433/control?target_session_attrs=read-write",
        "postgresql://reaper@[::1]:5432/control",
        "postgresql:///control?host=/var/run/postgresql",
        "host=a,b port=5432,5433 dbname=control",
        "host=/var/run/postgresql dbname=control",
        "hostaddr=127.0.0.1,::1 port=5432 sslmode=prefer",
        "service=control",
        "dbname=control",
    ],
)
def test_the_shapes_of_a_good_dsn_still_parse(dsn: str) -> None:
    assert isinstance(parse_dsn(dsn), dict)


def test_unset_is_libpq_defaults() -> None:
    assert parse_dsn(None) == {} and parse_dsn("") == {}
    with pytest.raises(ConfigError):
        parse_dsn("postgresql://reaper@db:port/control")

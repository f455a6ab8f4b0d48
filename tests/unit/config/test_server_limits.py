"""A duration that becomes a PostgreSQL setting (or a libpq parameter) is refused at load when
it is longer than what that setting holds, in one line naming the maximum, whatever its
source; before, `statement_timeout = "25d"` failed every connection."""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta

import pytest

from reaper.cli import main
from reaper.config.connection import connection_settings
from reaper.config.declarations import Settings
from reaper.config.settings import build_settings
from reaper.config.values import (
    CLIENT_MAX_DURATION,
    SERVER_MAX_DURATION,
    BoundedDuration,
    format_duration,
)
from reaper.db import ConnectionSettings
from reaper.errors import ConfigError

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/postgres"
# The durations ConnectionSettings hands the server as session settings.
SERVER_DURATIONS = [
    f.name
    for f in dataclasses.fields(ConnectionSettings)
    if f.type == "timedelta" and f.name in ConnectionSettings().pinned()
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith(("REAPER_", "PG")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("REAPER_DSN", UNREACHABLE)


def test_every_duration_of_a_connection_is_bounded_by_its_value_type() -> None:
    assert SERVER_DURATIONS == [
        "statement_timeout",
        "lock_timeout",
        "idle_in_transaction_session_timeout",
    ]
    durations = [f.name for f in dataclasses.fields(ConnectionSettings) if f.type == "timedelta"]
    for name in durations:
        value_type = getattr(Settings, name).value_type
        assert isinstance(value_type, BoundedDuration), name
        limit = SERVER_MAX_DURATION if name in SERVER_DURATIONS else CLIENT_MAX_DURATION
        assert value_type.maximum <= limit, name


@pytest.mark.parametrize("name", SERVER_DURATIONS)
@pytest.mark.parametrize("source", ["flag", "variable", "file"])
def test_a_server_duration_past_the_maximum_is_refused_in_one_line(name: str, source: str) -> None:
    labels = {"flag": "--" + name.replace("_", "-"), "variable": "REAPER_" + name.upper()}
    with pytest.raises(ConfigError) as exc:
        if source == "file":
            build_settings({}, {name: "25d"}, source="reaper.toml")
        else:
            build_settings({name: "25d"}, labels={name: labels[source]})
    line = str(exc.value)
    where = labels.get(source, f"reaper.toml key {name}")
    assert line.startswith(f"{where}: 25d is more than a PostgreSQL time setting holds; ")
    assert "at most 24d20h31m23s647ms" in line and "\n" not in line


@pytest.mark.parametrize("name", SERVER_DURATIONS)
def test_the_maximum_itself_reaches_the_session(name: str) -> None:
    settings = build_settings({name: format_duration(SERVER_MAX_DURATION)})
    assert getattr(settings, name) == timedelta(milliseconds=2_147_483_647)
    assert connection_settings(settings).pinned()[name] == "2147483647ms"


def test_a_connect_timeout_libpq_cannot_hold_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--connect-timeout: 30000d is more than libpq's"):
        build_settings({"connect_timeout": "30000d"})


def test_the_command_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run-once", "--statement-timeout", "25d"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("reaper: --statement-timeout: 25d is more than") and "24d20h" in err

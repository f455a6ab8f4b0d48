"""Every error about a value names where the value came from (flag, variable, file key), at
start and when the daemon reads its file again (SIGHUP): the origin travels in the loaded
configuration."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from reaper.cli import load, settings_options
from reaper.config.connection import connection_settings
from reaper.config.load import Config
from reaper.db import Database
from reaper.errors import ConfigError

GOOD = "postgresql://postgres@127.0.0.1:1/postgres"
BAD = "garbage dsn password=s3cret"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith(("REAPER_", "PG")):
            monkeypatch.delenv(k)


def _loaded(args: list[str], env: dict[str, str]) -> Config:
    got: list[Config] = []

    @click.command()
    @settings_options
    def probe(config_path: Path | None, **raw: Any) -> None:
        got.append(load(config_path, raw))

    result = CliRunner().invoke(probe, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return got[0]


def _dsn_error(config: Config) -> str:
    with pytest.raises(ConfigError) as exc:
        Database(connection_settings(config.settings))
    line = str(exc.value)
    assert "s3cret" not in line and "garbage" not in line and "\n" not in line
    return line


@pytest.fixture
def toml(tmp_path: Path) -> Path:
    return tmp_path / "reaper.toml"


def test_a_bad_dsn_from_the_file_on_reload_is_named_by_its_file_key(toml: Path) -> None:
    toml.write_text(f'dsn = "{GOOD}"\n')
    config = _loaded(["--config", str(toml)], {})
    assert connection_settings(config.settings).dsn_label == f"{toml} key dsn"
    toml.write_text(f'dsn = "{BAD}"\n')
    line = _dsn_error(config.reload())
    assert line.startswith(f"{toml} key dsn: the DSN (not shown) does not parse")


@pytest.mark.parametrize(
    ("args", "env", "label"),
    [
        (["--dsn", BAD], {}, "--dsn"),
        ([], {"REAPER_DSN": BAD}, "REAPER_DSN"),
    ],
)
def test_a_bad_dsn_given_by_flag_or_variable_keeps_its_name_on_reload(
    toml: Path, args: list[str], env: dict[str, str], label: str
) -> None:
    toml.write_text('node_retention = "30d"\n')
    config = _loaded([*args, "--config", str(toml)], env)
    assert _dsn_error(config).startswith(f"{label}: the DSN (not shown) does not parse")
    toml.write_text('node_retention = "20d"\n')
    assert _dsn_error(config.reload()).startswith(f"{label}: ")


def test_a_rule_across_settings_names_where_each_came_from_on_reload(toml: Path) -> None:
    toml.write_text('ephemeral_node_retention = "1h"\n')
    config = _loaded(["--config", str(toml)], {"REAPER_NODE_RETENTION": "2d"})
    toml.write_text('ephemeral_node_retention = "3d"\n')
    with pytest.raises(ConfigError) as exc:
        config.reload()
    assert str(exc.value).startswith(
        f"ephemeral_node_retention (3d, from {toml} key ephemeral_node_retention) is longer "
        "than node_retention (2d, from REAPER_NODE_RETENTION): "
    )


def test_a_bad_value_from_a_variable_is_named_by_it_on_reload(toml: Path) -> None:
    toml.write_text("")
    config = _loaded(["--config", str(toml)], {"REAPER_BATCH_SIZE": "10"})
    reloaded = config.reload()
    assert reloaded.settings.batch_size == 10
    assert reloaded.settings.origins["batch_size"] == "REAPER_BATCH_SIZE"
    # A value the file gives after a reload is named by the file.
    toml.write_text('lock_timeout = "soon"\n')
    with pytest.raises(ConfigError, match=rf"^{toml} key lock_timeout: 'soon' is not"):
        config.reload()

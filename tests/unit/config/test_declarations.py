"""A setting is declared once: a throwaway declaration, added by a fixture, gets its flag,
its variable, its TOML key, its [sweeps.NAME] key, its attribute on every sweep and its entry
in the reference, and the error messages that list keys name it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from reaper.cli import load, settings_options
from reaper.config.declarations import PerSweep, Settings
from reaper.config.load import Config, load_config
from reaper.config.setting import Setting
from reaper.config.values import positive_int
from reaper.errors import ConfigError


def _declare(monkeypatch: pytest.MonkeyPatch, owner: type[Any], setting: Setting[Any]) -> None:
    name = "throwaway_rows"
    monkeypatch.setattr(owner, name, setting, raising=False)
    setting.__set_name__(owner, name)


@pytest.fixture
def per_sweep(monkeypatch: pytest.MonkeyPatch) -> Iterator[Setting[int]]:
    """A per-sweep setting that exists only for this test."""
    setting = Setting(7, positive_int, "Rows a throwaway knob counts, for a test.", "ROWS")
    _declare(monkeypatch, PerSweep, setting)
    yield setting


@pytest.fixture
def global_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[Setting[int]]:
    """A setting of Settings alone, for this test."""
    setting = Setting(7, positive_int, "Rows a throwaway knob counts, for a test.", "ROWS")
    _declare(monkeypatch, Settings, setting)
    yield setting


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith(("REAPER_", "PG")):
            monkeypatch.delenv(k)


def _loaded(args: list[str], env: dict[str, str] | None = None) -> Config:
    """The config a command with the settings' options loads from ``args`` and ``env``."""
    got: list[Config] = []

    @click.command()
    @settings_options
    def probe(config_path: Path | None, **raw: Any) -> None:
        got.append(load(config_path, raw))

    result = CliRunner().invoke(probe, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return got[0]


def _help() -> str:
    @click.command()
    @settings_options
    def probe(config_path: Path | None, **raw: Any) -> None:
        pass

    return CliRunner().invoke(probe, ["--help"], terminal_width=200).output


def _reference() -> str:
    from tests.unit.project.test_docs import hooks

    table: str = hooks.settings_table()
    return table


def _sweep(config: Config, name: str) -> Any:
    return next(s for s in config.sweeps if s.name == name)


def test_a_per_sweep_setting_follows_from_its_declaration(
    per_sweep: Setting[int], tmp_path: Path
) -> None:
    assert Settings().throwaway_rows == 7  # type: ignore[attr-defined]
    # The flag and the variable, with their help.
    text = _help()
    assert "--throwaway-rows ROWS" in text and "REAPER_THROWAWAY_ROWS" in text
    assert "Rows a throwaway knob counts" in text
    assert _loaded(["--throwaway-rows", "9"]).settings.throwaway_rows == 9  # type: ignore[attr-defined]
    from_env = _loaded([], env={"REAPER_THROWAWAY_ROWS": "11"}).settings
    assert from_env.throwaway_rows == 11  # type: ignore[attr-defined]
    # The TOML key, and the [sweeps.NAME] key: each sweep's attribute is its own, else the
    # global one.
    path = tmp_path / "reaper.toml"
    path.write_text("throwaway_rows = 5\n[sweeps.router_leases]\nthrowaway_rows = 3\n")
    config = _loaded(["--config", str(path)])
    assert config.settings.throwaway_rows == 5  # type: ignore[attr-defined]
    assert _sweep(config, "router_leases").throwaway_rows == 3
    assert _sweep(config, "nodes_silent").throwaway_rows == 5
    # A declared sweep has it too.
    declared = load_config(
        {},
        {
            "sweeps": {
                "audit": {
                    "table": "public.audit_log",
                    "reason": "expired",
                    "age": "logged_at",
                    "retention": "7d",
                    "throwaway_rows": 2,
                }
            }
        },
    )
    assert _sweep(declared, "audit").throwaway_rows == 2
    # Its entry in the reference, marked as one a [sweeps.NAME] table may set.
    entry = next(line for line in _reference().splitlines() if "`throwaway_rows`" in line)
    assert "`--throwaway-rows ROWS`, `REAPER_THROWAWAY_ROWS`; default `7`" in entry
    assert "A `[sweeps.NAME]` table may set its own `throwaway_rows`." in entry


def test_its_value_type_refuses_a_bad_value_from_every_source(per_sweep: Setting[int]) -> None:
    with pytest.raises(ConfigError, match=r"^--throwaway-rows: must be a positive whole number"):
        load_config({"throwaway_rows": "0"})
    with pytest.raises(ConfigError, match=r"^reaper.toml key throwaway_rows: must be"):
        load_config({}, {"throwaway_rows": 0}, source="reaper.toml")
    with pytest.raises(ConfigError, match=r"\[sweeps.nodes_silent\] throwaway_rows: must be"):
        load_config({}, {"sweeps": {"nodes_silent": {"throwaway_rows": 0}}})


def test_the_messages_that_list_keys_list_it(per_sweep: Setting[int]) -> None:
    with pytest.raises(ConfigError) as unknown:
        load_config({}, {"sweeps": {"nodes_silent": {"zzz": 1}}})
    assert "throwaway_rows" in str(unknown.value).split("; known: ")[1]
    with pytest.raises(ConfigError) as redefined:
        load_config({}, {"sweeps": {"nodes_silent": {"reason": "x"}}})
    assert "throwaway_rows" in str(redefined.value).split("a built-in takes only ")[1]
    with pytest.raises(ConfigError, match="did you mean 'throwaway_rows'"):
        load_config({}, {"throwaway_row": 1})


def test_a_setting_of_settings_alone_is_no_sweep_key(global_only: Setting[int]) -> None:
    assert load_config({"throwaway_rows": "4"}).settings.throwaway_rows == 4  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"unknown key\(s\) throwaway_rows"):
        load_config({}, {"sweeps": {"nodes_silent": {"throwaway_rows": 1}}})
    entry = next(line for line in _reference().splitlines() if "`throwaway_rows`" in line)
    assert "[sweeps.NAME]" not in entry

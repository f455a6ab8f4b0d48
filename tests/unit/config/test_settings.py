"""Settings, without a database: durations, the precedence flags > REAPER_* env > TOML file >
defaults, the validation rules, and the ``[sweeps.NAME]`` tables."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from reaper.cli import load, settings_options
from reaper.config.load import load_config
from reaper.config.settings import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_EPHEMERAL_NODE_RETENTION,
    DEFAULT_NODE_RETENTION,
    DEFAULT_SESSION_RETENTION,
    Settings,
    build_settings,
)
from reaper.config.values import format_duration, parse_duration
from reaper.errors import ConfigError
from tests.support import BUILTIN_SWEEPS, enabled, sweeps_of


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30d", timedelta(days=30)),
        ("72h", timedelta(hours=72)),
        ("1h", timedelta(hours=1)),
        ("90m", timedelta(minutes=90)),
        ("45s", timedelta(seconds=45)),
        ("500ms", timedelta(milliseconds=500)),
        ("2w", timedelta(weeks=2)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1d12h", timedelta(days=1, hours=12)),
        ("1.5h", timedelta(minutes=90)),
        (" 30d ", timedelta(days=30)),
        (timedelta(hours=3), timedelta(hours=3)),
        ("-1h", -timedelta(hours=1)),
        ("0s", timedelta(0)),
    ],
)
def test_parse_duration(text: Any, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "45",
        "2.5",
        45,
        0.5,
        "",
        " ",
        "30x",
        "d",
        "h30",
        "30 d",
        "1h 30m",
        "thirty days",
        "1e3s",
        "--1h",
        "+-1h",
        "-+1h",
        True,
    ],
)
def test_parse_duration_refuses(text: Any) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("3M", "'M': ambiguous"),
        ("1h3M", "'M': ambiguous"),
        ("3D", "case-sensitive"),
        (" 30D ", "case-sensitive"),
        ("72H", "case-sensitive"),
        ("10S", "case-sensitive"),
        ("2MS", "case-sensitive"),
        ("1W", "case-sensitive"),
        ("6mo", "month has no fixed length"),
        ("1y", "year has no fixed length"),
        ("1Y", "year has no fixed length"),
        ("5min", "'min': unknown unit"),
        ("3x", "'x': unknown unit"),
        ("12", "no unit"),
    ],
)
def test_parse_duration_names_the_accepted_units(text: str, why: str) -> None:
    """Units are case-sensitive and exact: anything else is refused with the list."""
    with pytest.raises(ValueError, match="accepted units: ms") as info:
        parse_duration(text)
    assert why in str(info.value)
    assert "m (minutes)" in str(info.value) and "w (7 d)" in str(info.value)


@pytest.mark.parametrize(
    "d",
    [
        timedelta(days=30),
        timedelta(hours=72),
        timedelta(minutes=90),
        timedelta(seconds=45),
        timedelta(milliseconds=1500),
        timedelta(days=1, hours=2, minutes=3, seconds=4),
    ],
)
def test_format_duration_reads_back(d: timedelta) -> None:
    assert parse_duration(format_duration(d)) == d


def test_defaults() -> None:
    s = build_settings({})
    assert s.session_retention == DEFAULT_SESSION_RETENTION == timedelta(hours=72)
    assert s.node_retention == DEFAULT_NODE_RETENTION == timedelta(days=30)
    assert s.ephemeral_node_retention == DEFAULT_EPHEMERAL_NODE_RETENTION == timedelta(hours=1)
    assert s.batch_size == DEFAULT_BATCH_SIZE
    assert s.dsn is None


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"node_retention": "0s"}, ["--node-retention", "positive"]),
        ({"session_retention": "-1h"}, ["--session-retention", "positive"]),
        ({"ephemeral_node_retention": "-5m"}, ["--ephemeral-node-retention", "positive"]),
        ({"node_retention": "soon"}, ["--node-retention", "not a duration"]),
        ({"batch_size": "0"}, ["--batch-size", "positive"]),
        ({"batch_size": "many"}, ["--batch-size"]),
        ({"heap_walk_threshold": "1.5"}, ["--heap-walk-threshold", "between 0 and 1"]),
        ({"strategy": "fast"}, ["--strategy", "auto"]),
        ({"synchronous_commit": "maybe"}, ["--synchronous-commit", "boolean"]),
        (
            {"ephemeral_node_retention": "2d", "node_retention": "1d"},
            ["ephemeral_node_retention", "2d", "node_retention", "1d"],
        ),
    ],
)
def test_invalid_values_name_the_setting(values: dict[str, str], words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        build_settings(values)
    message = str(info.value)
    assert "\n" not in message
    for w in words:
        assert w in message, message


def _toml_error(toml: str) -> str:
    """The one line that refuses the TOML file ``toml``."""
    with pytest.raises(ConfigError) as info:
        build_settings({}, tomllib.loads(toml), source="reaper.toml")
    return str(info.value)


@pytest.mark.parametrize(
    ("key", "refusal"),
    [
        ("parallel", "true is not a whole number;"),
        ("batch_size", "true is not a whole number;"),
        ("max_rows_per_run", "true is not a whole number;"),
        ("node_retention", "true is not a duration;"),
        ("jitter", "true is not a number;"),
        ("busy_share", "true is not a number;"),
    ],
)
def test_a_toml_boolean_is_quoted_as_toml_spells_it(key: str, refusal: str) -> None:
    assert _toml_error(f"{key} = true\n").startswith(f"reaper.toml key {key}: {refusal}")


@pytest.mark.parametrize(
    ("values", "line"),
    [
        (
            {"batch_size": "2000000000"},
            "--batch-size: 2000000000 is more than 1,000,000,000; is it a typo? Expected a whole "
            "number of rows, e.g. 10000",
        ),
        (
            {"node_retention": "40000d"},
            "--node-retention: '40000d' is longer than 100 years; is it a typo? Expected a "
            'duration with a unit, e.g. "30d", "72h", "90s" or "500ms"',
        ),
        (
            {"interval": "1ms"},
            "--interval: an interval of 1ms is under 100ms; is it a typo? Expected a duration "
            'with a unit, e.g. "30d", "72h", "90s" or "500ms"',
        ),
    ],
)
def test_a_question_and_its_fix_are_two_sentences(values: dict[str, str], line: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_settings(values)
    assert str(info.value) == line


@pytest.mark.parametrize(
    ("value", "rate"),
    [
        ("16000000", 16_000_000),
        (16_000_000, 16_000_000),
        ("16MB", 16_000_000),
        ("16MiB", 16 * 1024**2),
        ("16MB/s", 16_000_000),
        ("16 mb", 16_000_000),
        ("1.5MB", 1_500_000),
        ("1.5MiB", 1_572_864),
        ("1.1kB", 1100),
        ("0.5kB", 500),
        ("16/s", 16),
        ("1099511627776", 1024**4),
        ("1024GiB", 1024**4),
        # Zero is off, in any unit.
        ("0", None),
        (0, None),
        ("0MB", None),
        ("0.0GiB", None),
        ("0B/s", None),
        ("", None),
    ],
)
def test_a_byte_rate(value: object, rate: int | None) -> None:
    assert build_settings({"max_wal_rate": value}).max_wal_rate == rate


# The fix that follows each refusal of a byte rate: a flag's or a variable's text, then TOML's.
BYTE_RATE_FIX = (
    "bytes per second: a whole number, or a number and one of the units B, kB, MB, "
    'GB (powers of 1000), KiB, MiB, GiB (powers of 1024), e.g. "16MB" or "1.5MiB"; or 0 (off)'
)
BYTE_RATE_TOML_FIX = BYTE_RATE_FIX.replace("(powers of 1024),", "(powers of 1024) in quotes,")


@pytest.mark.parametrize(
    ("value", "refusal"),
    [
        # Without a unit a number is whole bytes, from a flag as from TOML.
        ("1.5", "'1.5' is not a whole number of bytes; expected"),
        ("1.5B", "'1.5B' is not a whole number of bytes; expected"),
        ("1TB", "'1TB': unit 'TB' is not accepted; expected"),
        ("1TiB", "'1TiB': unit 'TiB' is not accepted; expected"),
        ("16 parsecs", "'16 parsecs': unit 'parsecs' is not accepted; expected"),
        ("-1MB", "'-1MB' is negative; expected"),
        ("MB", "'MB' is not a number of bytes per second; expected"),
        ("0.0005kB", "'0.0005kB' is less than one byte per second; expected"),
        (
            "1099511627777",
            "'1099511627777' is more than 1 TiB (1024GiB) a second; is it a typo? Expected",
        ),
        ("1100GB", "'1100GB' is more than 1 TiB (1024GiB) a second; is it a typo? Expected"),
    ],
)
def test_a_bad_byte_rate_is_one_line(value: str, refusal: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_settings({"max_wal_rate": value})
    assert str(info.value) == f"--max-wal-rate: {refusal} {BYTE_RATE_FIX}"


@pytest.mark.parametrize(
    ("toml_value", "refusal"),
    [
        ("1.5", "1.5 is not a whole number of bytes"),
        ('"1.5"', "'1.5' is not a whole number of bytes"),
        ("true", "true is not a number of bytes per second"),
        ("-5", "-5 is negative"),
        ('"1TB"', "'1TB': unit 'TB' is not accepted"),
    ],
)
def test_a_bad_byte_rate_in_toml_is_one_line(toml_value: str, refusal: str) -> None:
    fix = BYTE_RATE_TOML_FIX if toml_value[0] != '"' else BYTE_RATE_FIX
    assert _toml_error(f"max_wal_rate = {toml_value}\n") == (
        f"reaper.toml key max_wal_rate: {refusal}; expected {fix}"
    )


@pytest.mark.parametrize("toml_value", ["0", "0.0", '"0MB"', '"0"'])
def test_a_byte_rate_of_zero_in_toml_is_off(toml_value: str) -> None:
    s = build_settings({}, tomllib.loads(f"max_wal_rate = {toml_value}\n"))
    assert s.max_wal_rate is None


@pytest.mark.parametrize(
    ("name", "shown_default"),
    [
        ("max_wal_rate", "0 (off)"),
        ("parallel", "1"),
        ("node_retention", "30d"),
        ("dsn", "none"),
        ("strict", "off"),
    ],
)
def test_the_help_shows_a_default_as_a_user_writes_it(name: str, shown_default: str) -> None:
    (f,) = [f for f in Settings.declarations() if f.name == name]
    assert f.shown_default == shown_default


@pytest.mark.parametrize(
    ("value", "line"),
    [
        (
            "0",
            "--parallel: must be a positive whole number, got 0; expected a whole number of "
            "connections from 1 to 16, e.g. 2",
        ),
        (
            "17",
            "--parallel: must be at most 16, got 17; expected a whole number of connections "
            "from 1 to 16, e.g. 2",
        ),
    ],
)
def test_parallel_is_1_to_16_as_its_help_says(value: str, line: str) -> None:
    from reaper.config.settings import MAX_PARALLEL

    (f,) = [f for f in Settings.declarations() if f.name == "parallel"]
    assert f"1 to {MAX_PARALLEL}," in f.help
    assert build_settings({"parallel": str(MAX_PARALLEL)}).parallel == MAX_PARALLEL
    with pytest.raises(ConfigError) as info:
        build_settings({"parallel": value})
    assert str(info.value) == line


def test_ephemeral_retention_may_equal_node_retention() -> None:
    s = build_settings({"ephemeral_node_retention": "7d", "node_retention": "7d"})
    assert s.ephemeral_node_retention == s.node_retention


def test_settings_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings().batch_size = 1  # type: ignore[misc]


def test_a_retention_setting_reaches_the_sweeps_that_read_it() -> None:
    sweeps = sweeps_of(build_settings({"node_retention": "10d"}))
    assert sweeps["router_leases"].retentions == {"cutoff": timedelta(days=10)}
    assert sweeps["nodes_session"].retentions == {"cutoff": timedelta(hours=72)}


# The precedence is click's (flag over variable) and build_settings' (both over the file):
# exercise them together through the options every command carries.
@click.command()
@settings_options
def probe(config_path: Path | None, **raw: Any) -> None:
    captured.append(load(config_path, raw).settings)


captured: list[Settings] = []


def resolve(args: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for k in list(os.environ):
        if k.startswith("REAPER_"):
            monkeypatch.delenv(k)
    captured.clear()
    result = CliRunner().invoke(probe, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return captured[-1]


def test_precedence_flags_env_toml_defaults(tmp_path: Path, monkeypatch) -> None:
    config = tmp_path / "reaper.toml"
    config.write_text(
        'node_retention = "10d"\n'
        'session-retention = "48h"\n'  # dashes work too
        'ephemeral_node_retention = "30m"\n'
        "batch_size = 100\n"
    )
    env = {"REAPER_NODE_RETENTION": "20d", "REAPER_SESSION_RETENTION": "24h"}
    flags = ["--config", str(config), "--node-retention", "25d"]
    s = resolve(flags, env, monkeypatch)
    assert s.node_retention == timedelta(days=25)  # flag over env and file
    assert s.session_retention == timedelta(hours=24)  # env over file
    assert s.ephemeral_node_retention == timedelta(minutes=30)  # file over default
    assert s.batch_size == 100
    assert s.statement_timeout == Settings().statement_timeout  # default
    # Without the flag, the variable wins; without the variable, the file.
    assert resolve(["--config", str(config)], env, monkeypatch).node_retention == timedelta(days=20)
    assert resolve(["--config", str(config)], {}, monkeypatch).node_retention == timedelta(days=10)
    assert resolve([], {}, monkeypatch).node_retention == DEFAULT_NODE_RETENTION


def test_config_file_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    config = tmp_path / "reaper.toml"
    config.write_text('dsn = "host=example.invalid"\n')
    s = resolve([], {"REAPER_CONFIG": str(config)}, monkeypatch)
    assert s.dsn == "host=example.invalid"


def test_unknown_toml_key_names_the_file_and_the_key() -> None:
    with pytest.raises(ConfigError, match=r"reaper\.toml.*node_retension"):
        build_settings({}, {"node_retension": "7d"}, source="reaper.toml")


def test_sweep_tables(tmp_path: Path) -> None:
    s = build_settings(
        {"batch_size": "500"},
        {
            "sweeps": {
                "nodes_silent": {"enabled": False},
                "router_leases": {"batch_size": 50},
            }
        },
    )
    sweeps = sweeps_of(s)
    assert not sweeps["nodes_silent"].enabled
    assert sweeps["nodes_session"].enabled
    assert sweeps["router_leases"].batch_size == 50
    assert sweeps["nodes_session"].batch_size == 500
    names = [sw.name for sw in enabled(s, ())]
    assert "nodes_silent" not in names
    assert names == [sw.name for sw in BUILTIN_SWEEPS if sw.name != "nodes_silent"]
    # Named on the command line, a disabled sweep runs.
    assert [sw.name for sw in enabled(s, ("nodes_silent",))] == ["nodes_silent"]


@pytest.mark.parametrize(
    "table",
    [
        {"nodes_silent": {"enabled": "perhaps"}},
        {"nodes_silent": {"enable": False}},
        {"nodes_silent": {"batch_size": -1}},
        {"nodes_silent": "off"},
    ],
)
def test_bad_sweep_tables(table: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"sweeps\.nodes_silent"):
        build_settings({}, {"sweeps": table})


def test_a_sweep_table_must_name_a_sweep() -> None:
    # A typo'd built-in is refused when the settings load, before any database work.
    with pytest.raises(ConfigError, match="nodes_slient"):
        load_config({}, {"sweeps": {"nodes_slient": {"enabled": False}}})

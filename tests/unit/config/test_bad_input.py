"""Every bad input is one line on stderr naming the setting and the fix, and exit code 2.

The table is generated from the settings' own definitions
(:meth:`reaper.config.settings.Settings.declarations`
and the kind each declares through its metavar): a new setting is covered by adding it. Each
setting gets every wrong value of its kind, plus the ones every setting must refuse (a TOML
date, time, array or table; NaN and infinity; control characters; bytes that are not UTF-8),
through the one chokepoint every source shares (:func:`reaper.config.settings.build_settings`,
whose parsers sit behind :func:`reaper.config.settings.scalar`), as a TOML value and as the
text of a flag or a REAPER_* variable. Then each source once per kind through the real command
line: a flag, a REAPER_* variable, a TOML key, each one line on stderr and exit 2. Odd config
files (a directory, a device, a FIFO, a huge file) are refused the same way, without hanging.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from reaper.cli import main
from reaper.config.settings import (
    Settings,
    build_settings,
)
from reaper.config.values import EXPECTED
from reaper.errors import ConfigError

# Checked before any connection: the DSN points nowhere (port 1 refuses at once).
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/postgres"

# Wrong values by kind (a setting's metavar), as TOML source and as flag/variable text.
TOML_BAD_EVERY = [
    "2024-01-01",
    "2024-01-01T00:00:00Z",
    "2024-01-01T00:00:00",
    "07:30:00",
    "[1, 2]",
    '["30d"]',
    '{ host = "x" }',
    "nan",
    "inf",
    "-inf",
    '"a\\u0007b"',
    '"x\\ny"',
]
TOML_BAD = {
    "ROWS": ["2.7", "-5", "1e3", "10000000000000", '"many"', "true", "0.0001"],
    "DURATION": ["-1", '"-1h"', '"5"', '"1000000d"', "true", "5", '"1e400d"'],
    "FRACTION": ["1.5", "-0.1", '"half"', "true"],
    "BYTES": [
        "-5",
        "2.5",
        '"16 parsecs"',
        '"-1MB"',
        "true",
        "false",
        '"2TB"',
        '"0.5"',
        '"1.5"',
        '"1TiB"',
        '"1100GB"',
    ],
    "SHARE": ["0", "1.5", "-0.1", '"half"', "true"],
    "CONNECTIONS": ["0", "17", "2.5", "-1", '"two"', "true"],
    "DSN": ["5", "true", "1.5", '""', '"  "'],
    "HOST:PORT": ["9465", '":99999"', '"nowhere"'],
    "auto|heap|index": ['"fast"', "1"],
    "drop|detach|off": ['"truncate"', "0", "false", '"delete"', "1", "true"],
    "FILE": ["5", "true"],
    "ZONE": ['"+09"', '"Mars/Base"', "9"],
    "CRON": [
        '"0 3 * *"',
        '"61 * * * *"',
        '"0 25 * * *"',
        '"0 0 30 2 *"',
        '"0 3 * * 8"',
        '"0 3 * * 5-1"',
        '"0 3 * * 3/2"',
        '"@daily"',
        '"x * * * *"',
        "3",
        "true",
    ],
    "WINDOW": [
        '"01:00"',
        '"25:00-05:00"',
        '"01:00-01:00"',
        '"1-5"',
        '"01:00-05:00 Mars"',
        '"01:60-02:00"',
        '"1:00-5:00"',
        "5",
        "true",
    ],
    "SCHEMA": [
        "5",
        "true",
        '""',
        '"pg_catalog"',
        '"information_schema"',
        '"pg_toast"',
        '"a\\nb"',
        '"' + "x" * 64 + '"',
    ],
    None: ['"maybe"', "2", "1.5"],
}
TEXT_BAD_EVERY = ["a\x07b", "x\ny", "\x1b[31mred", "\udcff\udcfe"]
TEXT_BAD = {
    "ROWS": ["2.7", "-5", "nan", "inf", "1e3", "9" * 5000, "many", "0x10"],
    "DURATION": ["5", "-1h", "nan", "inf", "2024-01-01", "9" * 400 + "d", "1h 30m"],
    "FRACTION": ["1.5", "nan", "inf", "-0.1", "half"],
    "BYTES": [
        "-5",
        "nan",
        "inf",
        "16 parsecs",
        "1e9",
        "2TB",
        "0.5",
        "MB",
        "1.5",
        "1.5B",
        "1TiB",
        "1100GB",
    ],
    "SHARE": ["0", "1.5", "nan", "inf", "-0.1", "half"],
    "CONNECTIONS": ["0", "17", "2.5", "-1", "two", "1e1", "inf"],
    "DSN": ["", "  "],
    "HOST:PORT": [":99999", "nowhere", ":-1"],
    "auto|heap|index": ["fast"],
    "drop|detach|off": ["truncate", "DROP TABLE", "delete", "DROP"],
    "FILE": [],
    "ZONE": ["+09", "Mars/Base", "UTC+1"],
    "CRON": [
        "0 3 * *",
        "0 3 * * * *",
        "60 * * * *",
        "0 0 31 4 *",
        "0 3 * * 0-8",
        "daily",
        "0 3 * * mon-fri/x",
        "0 3 * jan-mar/2 *",
        "0 3 * * mon#2",
    ],
    "WINDOW": ["01:00", "01:00-24:00", "05:00-05:00", "01:00 - ", "1am-5am", "-01:00-05:00"],
    "SCHEMA": ["pg_catalog", "information_schema", "pg_temp_3", "x" * 64],
    None: ["maybe", "2"],
}
# Where 0 means something: the settings that are off by default (None), those whose help says
# what 0 means ("0: no limit"), and a threshold of 0 rows. Every other count or duration
# refuses 0.
OPTIONAL_ZERO = {
    f.name for f in Settings.declarations() if getattr(Settings(), f.name) is None or "0:" in f.help
} | {"seq_scan_max_rows"}


# Each kind, in a fixed order, and the settings of each.
KINDS = sorted({f.metavar for f in Settings.declarations()}, key=str)


def _of_kind(kind: object) -> list[str]:
    return [f.name for f in Settings.declarations() if f.metavar == kind]


def _first_wrong(kind: object, values: dict[object, list[str]], every: list[str]) -> str:
    """The first wrong value of ``kind``, else the first one every setting refuses."""
    return (values.get(kind) or every)[0]


def _one_line(capsys: pytest.CaptureFixture[str], code: object, *words: str) -> str:
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("reaper: ") and "Traceback" not in err, err
    for w in words:
        assert w in line, line
    assert out == ""
    return line


def _run(argv: list[str]) -> object:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith(("REAPER_", "PG")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("REAPER_DSN", UNREACHABLE)


def test_every_setting_kind_is_covered() -> None:
    kinds = {f.metavar for f in Settings.declarations()}
    # A setting of a new kind: add its wrong values here, and its fix to EXPECTED.
    assert kinds <= set(TOML_BAD) and kinds <= set(TEXT_BAD) and kinds <= set(EXPECTED)


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_every_wrong_toml_value_names_the_key_and_the_fix(kind: object) -> None:
    """Each setting of ``kind`` refuses each wrong TOML value, at the one chokepoint."""
    for name in _of_kind(kind):
        # The variable would win over the file for the DSN; every other case has one.
        explicit = {} if name == "dsn" else {"dsn": UNREACHABLE}
        for toml_value in [*TOML_BAD_EVERY, *TOML_BAD.get(kind, [])]:
            with pytest.raises(ConfigError) as exc:
                build_settings(
                    explicit, tomllib.loads(f"{name} = {toml_value}\n"), source="reaper.toml"
                )
            line = str(exc.value)
            assert "\n" not in line and f"key {name}" in line, (toml_value, line)
            assert "expected" in line or "e.g." in line, (toml_value, line)


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_every_wrong_text_names_the_flag_or_variable_and_the_fix(kind: object) -> None:
    """Each setting of ``kind`` refuses each wrong text (a flag's or a variable's), at the one
    chokepoint, named as the command line names it: ``--flag`` or ``REAPER_*``."""
    for name in _of_kind(kind):
        flag, var = "--" + name.replace("_", "-"), "REAPER_" + name.upper()
        for text in [*TEXT_BAD_EVERY, *TEXT_BAD.get(kind, [])]:
            explicit = {"dsn": UNREACHABLE, name: text}
            with pytest.raises(ConfigError) as exc:
                build_settings(explicit)
            line = str(exc.value)
            assert "\n" not in line and flag in line, (text, line)
            assert "expected" in line or "e.g." in line, (text, line)
            with pytest.raises(ConfigError) as exc:
                build_settings(explicit, labels={name: var})
            assert var in str(exc.value), (text, str(exc.value))


# Each source once per kind, through the real command line (in-process): one line on stderr,
# exit 2, naming the key, the flag or the variable.


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_a_bad_toml_value_is_one_line_and_exit_2(
    kind: object,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = _of_kind(kind)[0]
    if name == "dsn":
        monkeypatch.delenv("REAPER_DSN")  # the variable would win over the file
    config = tmp_path / "reaper.toml"
    config.write_text(f"{name} = {_first_wrong(kind, TOML_BAD, TOML_BAD_EVERY)}\n")
    code = _run(["check", "--config", str(config)])
    line = _one_line(capsys, code, f"key {name}")
    assert "expected" in line or "e.g." in line, line


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_a_bad_flag_is_one_line_and_exit_2(
    kind: object, capsys: pytest.CaptureFixture[str]
) -> None:
    flag = "--" + _of_kind(kind)[0].replace("_", "-")
    code = _run(["check", f"{flag}={_first_wrong(kind, TEXT_BAD, TEXT_BAD_EVERY)}"])
    line = _one_line(capsys, code, flag)
    assert "expected" in line or "e.g." in line, line


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_a_bad_variable_is_one_line_and_exit_2(
    kind: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    var = "REAPER_" + _of_kind(kind)[0].upper()
    monkeypatch.setenv(var, _first_wrong(kind, TEXT_BAD, TEXT_BAD_EVERY))
    code = _run(["check"])
    _one_line(capsys, code, var)


@pytest.mark.parametrize(
    ("source", "refusal"),
    [
        ("flag", "'1.5' is not a whole number of bytes"),
        ("variable", "'1TB': unit 'TB' is not accepted"),
        ("file", "1.5 is not a whole number of bytes"),
    ],
)
def test_a_bad_byte_rate_is_one_line_and_exit_2(
    source: str,
    refusal: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The refusal, then the fix once: the units reaper takes."""
    if source == "flag":
        argv, label = ["check", "--max-wal-rate", "1.5"], "--max-wal-rate"
    elif source == "variable":
        monkeypatch.setenv("REAPER_MAX_WAL_RATE", "1TB")
        argv, label = ["check"], "REAPER_MAX_WAL_RATE"
    else:
        config = tmp_path / "reaper.toml"
        config.write_text("max_wal_rate = 1.5\n")
        argv, label = ["check", "--config", str(config)], f"{config} key max_wal_rate"
    line = _one_line(capsys, _run(argv), f"reaper: {label}: {refusal}; expected bytes per second")
    assert line.count("e.g.") == 1 and line.count("MiB") == 2, line


@pytest.mark.parametrize("text", TEXT_BAD_EVERY)
def test_text_no_setting_takes_is_one_line_from_a_flag_and_a_variable(
    text: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A string with lone surrogates is how Python hands over bytes that were not UTF-8.
    _one_line(capsys, _run(["check", f"--node-retention={text}"]), "--node-retention")
    monkeypatch.setenv("REAPER_NODE_RETENTION", text)
    _one_line(capsys, _run(["check"]), "REAPER_NODE_RETENTION")


@pytest.mark.parametrize("where", ["flag", "variable", "file"])
def test_a_dsn_that_does_not_parse_is_named_by_where_it_came_from(
    where: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = "garbage dsn password=s3cret"
    argv = ["status"]
    if where == "flag":
        argv += ["--dsn", bad]
        label = "--dsn"
    elif where == "variable":
        monkeypatch.setenv("REAPER_DSN", bad)
        label = "REAPER_DSN"
    else:
        monkeypatch.delenv("REAPER_DSN")
        config = tmp_path / "reaper.toml"
        config.write_text(f'dsn = "{bad}"\n')
        argv += ["--config", str(config)]
        label = f"{config} key dsn"
    line = _one_line(capsys, _run(argv), f"reaper: {label}: the DSN (not shown) does not parse")
    assert "s3cret" not in line and "garbage" not in line


@pytest.mark.parametrize(
    "name",
    [
        f.name
        for f in Settings.declarations()
        if f.name not in OPTIONAL_ZERO and f.metavar in ("ROWS", "DURATION")
    ],
)
def test_zero_is_refused_where_it_means_nothing(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(["check", f"--{name.replace('_', '-')}=0"])
    _one_line(capsys, code, name.replace("_", "-"))


@pytest.mark.parametrize(
    ("key", "toml_value"),
    [
        ("batch_size", "2.7"),
        ("batch_size", "nan"),
        ("interval", "2024-01-01"),
        ("retention", "[1]"),
        ("retention", "{ cutoff = 2024-01-01 }"),
        ("enabled", '"maybe"'),
        ("strategy", "inf"),
        ("table", '"a\\u0000b"'),
        ("after", '["x\\u0007"]'),
        ("max_seconds_per_run", "07:00:00"),
        ("schedule", '"0 3 * * 8"'),
        ("schedule", '"0 0 30 2 *"'),
        ("window", '"01:00-01:00"'),
        ("window", "01:00:00"),
        ("schedule_time_zone", '"Mars/Base"'),
        ("schedule_time_zone", '"+02"'),
    ],
)
def test_a_bad_sweep_table_value_is_one_line_and_exit_2(
    key: str, toml_value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "reaper.toml"
    config.write_text(f"[sweeps.nodes_silent]\n{key} = {toml_value}\n")
    _one_line(capsys, _run(["check", "--config", str(config)]), "[sweeps.nodes_silent]", key)


MARKUP = "[bold]x[/bold] [/] :x: [link=http://e.test]y[/link] \\[z]"


def test_text_from_the_database_is_printed_literally(capsys: pytest.CaptureFixture[str]) -> None:
    """Names and server messages are text, never rich markup or emoji codes."""
    from reaper.commands.render import print_results, print_status
    from reaper.commands.status import SweepStatus
    from reaper.engine.result import SweepResult

    print_results(
        [SweepResult("s", MARKUP, MARKUP, outcome="failure", error=MARKUP)], dry_run=False
    )
    print_status([SweepStatus("s", MARKUP, "r", error=MARKUP)])
    out = capsys.readouterr().out
    joined = "".join(line.strip(" │|") for line in out.splitlines())
    assert out.count(MARKUP) >= 1 and "❌" not in out, out
    assert MARKUP.replace(" ", "") in joined.replace(" ", ""), out

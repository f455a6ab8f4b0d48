"""A config file that nests deep is refused in one line (exit 2 at start; on SIGHUP the
daemon logs one line and keeps its running settings), whichever way it nests: arrays, inline
tables, table headers, dotted keys, under [sweeps.NAME] or at the top (the daemon's side:
tests/process/daemon/test_reload_origins.py). So is a former release's predicate nested
deep. Nothing reaper reads from a file recurses without bound."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from reaper.cli import main
from reaper.config import nesting
from reaper.config.load import load_config, read_config
from reaper.config.nesting import MAX_DEPTH
from reaper.errors import ConfigError

N = 20_000
DEEP = {
    "arrays": "batch_size = " + "[" * N + "]" * N,
    "inline tables": "batch_size = " + "{a = " * N + "1" + "}" * N,
    "a table header": "[" + ".".join(["a"] * N) + "]\nb = 1",
    "dotted keys": ".".join(["a"] * N) + " = 1",
    "dotted keys in an inline table": "x = { " + ".".join(["a"] * N) + " = 1 }",
    "a sweep's filter": "[sweeps.s]\nwhere = " + "{ a = " * N + "1" + " }" * N,
    "a sweep's rule": "[sweeps.s." + ".".join(["rule"] * N) + "]\nage = 'x'",
    "arrays of tables": "".join(f"[[{'.'.join(['r'] * (i + 1))}]]\n" for i in range(40)),
    "just past the bound": "x = " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
}
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/postgres"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith(("REAPER_", "PG")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("REAPER_DSN", UNREACHABLE)


@pytest.mark.parametrize("text", DEEP.values(), ids=DEEP.keys())
def test_a_deep_file_is_refused_in_one_line_at_start(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "reaper.toml"
    path.write_text(text + "\n")
    with pytest.raises(SystemExit) as exc:
        main(["run-once", "--config", str(path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"reaper: config file {path}: ") and f"deeper than {MAX_DEPTH}" in err


@pytest.mark.parametrize("text", DEEP.values(), ids=DEEP.keys())
def test_a_reload_of_a_deep_file_is_refused_in_one_line(text: str, tmp_path: Path) -> None:
    path = tmp_path / "reaper.toml"
    path.write_text('node_retention = "20d"\n')
    config = read_config(path, {"dsn": UNREACHABLE})
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as exc:
        config.reload()
    assert f"deeper than {MAX_DEPTH}" in str(exc.value) and "\n" not in str(exc.value)


def test_the_deepest_file_reaper_reads_loads(tmp_path: Path) -> None:
    path = tmp_path / "reaper.toml"
    path.write_text(
        "[sweeps.s]\ntable = 'public.t'\nreason = 'old'\n"
        "[[sweeps.s.rule]]\nage = 'at'\nretention = '1d'\nwhere = { kind = ['a', 'b'] }\n"
        "[[sweeps.s.rule]]\nage = 'at'\nretention = '2d'\n"
    )
    assert [s.name for s in read_config(path, {}).sweeps if s.name == "s"] == ["s"]


@pytest.mark.parametrize(
    "text",
    [
        'description = "' + "[" * N + '"',
        "description = '" + "{" * N + "'",
        'description = """' + "[" * N + '\n"""',
        "description = '''" + "[" * N + "''''",
        "# a comment is not nesting: " + "[" * N + '\ndescription = "\\"[[["',
    ],
    ids=["basic string", "literal string", "multi-line string", "multi-line literal", "comment"],
)
def test_brackets_in_strings_and_comments_are_not_nesting(text: str, tmp_path: Path) -> None:
    path = tmp_path / "reaper.toml"
    path.write_text(
        "[sweeps.s]\ntable = 'public.t'\nreason = 'old'\nage = 'at'\nretention = '1d'\n"
        + text
        + "\n"
    )
    (sweep,) = [s for s in read_config(path, {}).sweeps if s.name == "s"]
    assert sweep.description.strip().strip("[{'\"\\") == ""


@pytest.mark.parametrize(
    "predicate",
    [
        " AND ".join(["(kind = 'a'"] * 3000) + ")" * 3000,
        "(" * 3000 + "at < %(cutoff)s" + ")" * 3000,
        "NOT " * 20_000 + "done",
    ],
    ids=["nested ANDs", "parentheses", "NOTs"],
)
def test_a_deep_predicate_of_a_former_release_is_refused_in_one_line(predicate: str) -> None:
    body = {"table": "public.t", "reason": "old", "retention": "1d", "predicate": predicate}
    with pytest.raises(ConfigError) as exc:
        load_config({}, {"sweeps": {"s": body}})
    line = str(exc.value)
    assert "predicate: SQL text is no longer accepted" in line and "\n" not in line


@pytest.mark.parametrize(
    "text",
    [
        "x = 1.5\ny = [1.5, 2.5, { a.b = 0.25 }]",
        "t = 1979-05-27T00:32:00.999999Z",
        ".".join(["a"] * MAX_DEPTH) + " = 1",
        "x = " + "[" * MAX_DEPTH + "]" * MAX_DEPTH,
        '"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r" = 1',
    ],
    ids=["floats", "a time's fraction", "the longest key", "the deepest array", "quoted dots"],
)
def test_what_is_within_the_bound_passes_the_scan(text: str) -> None:
    nesting.check_text(text)
    nesting.check_value(tomllib.loads(text))

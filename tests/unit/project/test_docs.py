"""The docs stay true: the references are generated from the code, and every ``reaper ...``
command line the README and the docs show names commands and options that exist."""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path
from types import ModuleType

import click
import pytest

from reaper.config.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reaper_docs_hooks", DOCS / "hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


hooks = _hooks()


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_the_settings_reference_names_every_setting() -> None:
    table = hooks.settings_table()
    for f in Settings.declarations():
        flag = "--" + f.name.replace("_", "-")
        assert f"`{flag} " in table and f"`REAPER_{f.name.upper()}`" in table, f.name
        assert " ".join(f.help.split()) in table, f.name
    assert table in (DOCS / "configuration.md").read_text()


def test_the_metrics_reference_names_every_metric() -> None:
    table = hooks.metrics_table()
    names = [m.name for m in hooks.metric_defs()]
    assert "reaper_deleted_rows_total" in names and "reaper_batch_duration_seconds" in names
    for name in names:
        assert f"- **`{name}`** (" in table
    assert table in (DOCS / "metrics.md").read_text()


def test_every_command_and_flag_is_in_the_references() -> None:
    text = hooks.commands_table() + hooks.settings_table()
    missing = []
    for path, cmd in hooks.commands():
        if f"### `{path}`" not in text:
            missing.append(path)
        for param in cmd.params:
            if isinstance(param, click.Option):
                missing += [
                    f"{path} {o}"
                    for o in param.opts
                    if o.startswith("--") and o != "--help" and f"`{o}" not in text
                ]
    assert not missing, missing
    assert hooks.commands_table() in (DOCS / "commands.md").read_text()


def test_the_references_in_the_pages_are_the_codes() -> None:
    """Each page holds its reference itself (it reads so on the code host, where nothing
    fills a marker), as the code makes it now: `make docs-reference` after a change."""
    assert hooks.stale_pages() == [], "run `make docs-reference`"
    stale = hooks.with_references(
        "<!-- reference:metrics -->\n- `reaper_gone` (counter): old\n<!-- /reference:metrics -->"
    )
    assert "reaper_gone" not in stale and "reaper_deleted_rows_total" in stale


@pytest.mark.parametrize("render", ["settings_table", "metrics_table", "commands_table"])
def test_a_reference_never_breaks_a_name(render: str) -> None:
    """A list, never a table (whose squeezed columns break identifiers mid-word), every
    identifier whole in a code span, and the site's style keeps a code span from breaking
    inside a word."""
    text = getattr(hooks, render)()
    assert not [line for line in text.splitlines() if line.lstrip().startswith("|")]
    names = re.findall(r"\b(?:REAPER_[A-Z_]+|reaper_[a-z_]+|--[a-z][a-z-]+)", text)
    assert names
    for name in names:
        assert re.search(rf"`[^`]*(?<![\w-]){re.escape(name)}(?![\w-])[^`]*`", text), name
    css = (DOCS / "stylesheets" / "reference.css").read_text()
    assert "word-break: keep-all" in css and "overflow-wrap: normal" in css
    assert "stylesheets/reference.css" in (ROOT / "mkdocs.yml").read_text()


# A code block's line that runs reaper: after a prompt, variables, or a path to the script.
COMMAND_IN_BLOCK = re.compile(
    r"\s*(?:\$ )?(?:[A-Z_]+=\S+ )*(?:[\w./-]*/)?(reaper (?:[a-z-]+|--)[^#|;&)`]*)"
)


def command_lines(text: str) -> list[str]:
    """The ``reaper ...`` command lines of a page: code blocks' lines and inline code spans."""
    out = []
    fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            m = re.match(COMMAND_IN_BLOCK, line)
            if m:
                out.append(m.group(1))
        else:
            out += [
                span
                for span in re.findall(r"`([^`]+)`", line)
                if re.match(r"(?:\.venv/bin/)?reaper (?:[a-z-]+|--)", span)
            ]
    return out


def check_command_line(line: str) -> str | None:
    """None when ``line`` runs a real command with real options; else what is wrong."""
    try:
        words = shlex.split(line.replace("...", ""))
    except ValueError:
        words = line.split()
    words = words[1:]
    cmd: click.Command = hooks.commands()[0][1]
    chain = [cmd]
    while words and isinstance(cmd, click.Group) and not words[0].startswith("-"):
        sub = cmd.commands.get(words[0])
        if sub is None:
            return f"no command {words[0]!r}"
        cmd = sub
        chain.append(cmd)
        words = words[1:]
    known = {o for c in chain for p in c.params for o in getattr(p, "opts", [])} | {"--help"}
    for word in words:
        opt = word.split("=")[0]
        if opt.startswith("--") and len(opt) > 2 and opt not in known:
            return f"no option {opt}"
    return None


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_line_shown_exists(page: Path) -> None:
    wrong = [
        f"{line!r}: {why}"
        for line in command_lines(page.read_text("utf-8"))
        if (why := check_command_line(line))
    ]
    assert not wrong, wrong


def test_the_check_catches_a_wrong_command_line() -> None:
    assert check_command_line("reaper run-once --dry-run --sweep nodes_silent") is None
    assert check_command_line("reaper --log-level debug run-once") is None
    assert check_command_line("reaper indexes ensure --dry-run") is None
    assert check_command_line("reaper run-once --dryrun") == "no option --dryrun"
    assert check_command_line("reaper runonce") == "no command 'runonce'"
    assert check_command_line("reaper status --dry-run") == "no option --dry-run"
    assert command_lines("run `reaper status --wide` then\n```sh\nreaper check  # x\n```") == [
        "reaper status --wide",
        "reaper check  ",
    ]


def test_the_readme_is_short_and_its_links_exist() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    assert len(readme.encode()) <= 10_000
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target
    for cmd in ("make demo", "make test", "make unit", "make demo-server", ".venv/bin/reaper"):
        assert cmd in readme


def test_the_site_lists_every_page() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in DOCS.rglob("*.md"):
        assert str(page.relative_to(DOCS)) in nav, page


def test_no_page_refers_to_issues() -> None:
    for page in pages():
        text = page.read_text("utf-8")
        assert not re.search(r"\bissues? \d|\bissue\b", text, re.I), page


def test_the_custom_sweeps_page_names_every_key_of_a_sweep() -> None:
    """Every key a [sweeps.NAME] table takes is in the page's table of keys, and each key it
    refuses is in its list of what reaper refuses: a sweep declared from the page is the
    sweep the code reads, and a key the page names is one the code takes."""
    from reaper.config.settings import builtin_keys, setting_keys, sweep_keys

    text = (DOCS / "custom-sweeps.md").read_text()
    keys_table = text[text.index("## Every key") : text.index("## What reaper refuses")]
    refused = text[text.index("## What reaper refuses") :].split("\n\n")[2]
    documented = set(
        re.findall(
            r"`(\w+)`",
            "".join(
                line.split("|")[1] for line in keys_table.splitlines() if line.startswith("| `")
            ),
        )
    )
    refused_keys = {"predicate", "since"}
    # The settings a sweep may set are marked in the configuration reference, generated.
    keys = set(sweep_keys()) - {s.name for s in setting_keys()}
    assert keys - refused_keys <= documented <= set(builtin_keys()) | keys
    for key in refused_keys:
        assert f"`{key}`" in refused, key

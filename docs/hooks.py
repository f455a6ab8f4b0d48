"""References generated from the code, so that they cannot drift from it.

A page holds each reference itself, between ``<!-- reference:NAME -->`` and
``<!-- /reference:NAME -->``, so that it reads the same on the code host as in the built site;
``python docs/hooks.py`` (``make docs-reference``) rewrites what is between the markers from
the code's own definitions:

- ``settings``: every setting, from its declaration (:mod:`reaper.config.declarations`: help
  text, metavar, default), with its flag, variable and TOML key, and whether a
  ``[sweeps.NAME]`` table may set it;
- ``metrics``: every metric of :class:`reaper.metrics.Metrics`, from its definition (name as
  exported, type, labels, help text);
- ``commands``: every command of the ``reaper`` CLI and its own options (the settings' flags
  are in the settings reference), from the click definitions.

Each is a list, one entry a line, never a table: a table squeezes its columns until an
identifier breaks mid-word (``REAPER_BATC`` / ``H_SIZE``), and docs/stylesheets/reference.css
keeps an inline code span from breaking inside a word in the site. MkDocs runs this file as a
hook (``hooks:`` in mkdocs.yml): ``make docs`` fails (strict) while a page's reference is
stale, as ``tests/unit/project/test_docs.py`` does, which imports the same functions.

    python docs/hooks.py          # rewrite the references in the pages
    python docs/hooks.py --check  # exit 1 when one is stale
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

import click
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

MARKERS = ("settings", "metrics", "commands")
DOCS = Path(__file__).resolve().parent
# The page that holds each reference.
PAGES = {"settings": "configuration.md", "metrics": "metrics.md", "commands": "commands.md"}


def _cell(text: str) -> str:
    """One line of text (whitespace collapsed)."""
    return " ".join(text.split())


def settings_table() -> str:
    """The configuration reference: one entry per setting (its TOML key, flag and variable,
    its default as the CLI shows it, its meaning)."""
    from reaper.config.settings import Settings, setting_keys

    per_sweep = setting_keys()
    rows = []
    for s in Settings.declarations():
        sweep = f" A `[sweeps.NAME]` table may set its own `{s.name}`." if s in per_sweep else ""
        rows.append(
            f"- **`{s.name}`**: `{s.flag} {s.metavar or 'BOOL'}`, `{s.envvar}`; default "
            f"`{_cell(s.shown_default)}`. {_cell(s.help)}{sweep}"
        )
    return "\n".join(rows) + "\n"


@dataclasses.dataclass(frozen=True)
class MetricDef:
    """One metric as :class:`reaper.metrics.Metrics` defines it."""

    name: str  # the family name, as exported (a counter with _total)
    type: str  # counter, gauge, histogram, ...
    labels: tuple[str, ...]
    help: str

    def series(self) -> tuple[str, ...]:
        """The names of the series a scrape shows for this metric."""
        if self.type == "histogram":
            return tuple(self.name + s for s in ("_bucket", "_sum", "_count"))
        if self.type == "summary":
            return (self.name, self.name + "_sum", self.name + "_count")
        return (self.name,)


def metric_defs() -> list[MetricDef]:
    """Every metric of :class:`reaper.metrics.Metrics`, in definition order."""
    from reaper.metrics import Metrics

    metrics = Metrics([], CollectorRegistry(), daemon=True)
    out = []
    for value in vars(metrics).values():
        if not isinstance(value, MetricWrapperBase):
            continue
        for family in value.describe():
            name = family.name + ("_total" if family.type == "counter" else "")
            labels = tuple(getattr(value, "_labelnames", ()))
            out.append(MetricDef(name, family.type, labels, family.documentation))
    return out


def metrics_table() -> str:
    """The metrics reference: one entry per metric (name, type, labels, meaning)."""
    rows = []
    for m in metric_defs():
        labels = ", ".join(f"`{label}`" for label in m.labels)
        kind = f"{m.type}, labels {labels}" if labels else m.type
        rows.append(f"- **`{m.name}`** ({kind}): {_cell(m.help)}")
    return "\n".join(rows) + "\n"


def commands() -> list[tuple[str, click.Command]]:
    """Every command of the CLI as (``reaper sub``, command), the group first."""
    from reaper.cli import cli

    def walk(group: click.Group, prefix: str) -> list[tuple[str, click.Command]]:
        out: list[tuple[str, click.Command]] = [(prefix, group)]
        for name, cmd in group.commands.items():
            path = f"{prefix} {name}"
            out += walk(cmd, path) if isinstance(cmd, click.Group) else [(path, cmd)]
        return out

    return walk(cli, "reaper")


def own_options(cmd: click.Command) -> list[click.Option]:
    """The options of ``cmd`` that are not settings (those are in the settings table)."""
    from reaper.config.settings import Settings

    settings = {s.name for s in Settings.declarations()}
    return [
        p
        for p in cmd.params
        if isinstance(p, click.Option) and p.name not in settings and "--help" not in p.opts
    ]


def commands_table() -> str:
    """The commands reference: each command's summary and its own options."""
    out = []
    for path, cmd in commands():
        out.append(f"### `{path}`\n")
        out.append(_cell(cmd.help or "").split("\b")[0] + "\n")
        opts = own_options(cmd)
        if cmd.params and any(
            isinstance(p, click.Option) and p.name not in {o.name for o in opts}
            for p in cmd.params
            if "--help" not in getattr(p, "opts", [])
        ):
            out.append("It also takes every setting (see [Configuration](configuration.md)).\n")
        if opts:
            for o in opts:
                names = ", ".join(f"`{n}`" for n in o.opts)
                help_text = _cell(o.help or "")
                if o.envvar:
                    help_text += f" (environment: `{o.envvar}`)"
                out.append(f"- {names}: {help_text}")
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


RENDER = {"settings": settings_table, "metrics": metrics_table, "commands": commands_table}


def _region(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- reference:{name} -->\n)(.*?)(<!-- /reference:{name} -->)", re.S)


def with_references(markdown: str) -> str:
    """``markdown`` with each reference region rewritten from the code."""
    for name, render in RENDER.items():
        body = f"\n{render()}\n"
        markdown = _region(name).sub(lambda m, b=body: m.group(1) + b + m.group(3), markdown)
    return markdown


def stale_pages() -> list[Path]:
    """The pages whose references differ from the code's (or lack their region)."""
    out = []
    for name, page in PAGES.items():
        text = (DOCS / page).read_text()
        if not _region(name).search(text) or with_references(text) != text:
            out.append(DOCS / page)
    return out


# The changelog lives at the repository's root (CHANGELOG.md), where its links to the pages
# read ``docs/engine.md``; the site's changelog page includes it with those links made
# relative to docs/, so that the strict build checks them like any other page's.
_CHANGELOG_INCLUDE = '--8<-- "CHANGELOG.md"'
_DOCS_LINK = re.compile(r"\]\(docs/")


def changelog_page() -> str:
    """CHANGELOG.md as the site's changelog page shows it: links into docs/ made relative."""
    return _DOCS_LINK.sub("](", (DOCS.parent / "CHANGELOG.md").read_text("utf-8"))


def on_page_markdown(markdown: str, page: Any = None, **_: Any) -> str:
    """MkDocs hook: a page whose reference is stale fails the build; the changelog page is
    CHANGELOG.md with its links made relative to docs/ (:func:`changelog_page`)."""
    if markdown.strip() == _CHANGELOG_INCLUDE:
        return changelog_page()
    if with_references(markdown) != markdown:
        from mkdocs.exceptions import PluginError

        where = getattr(getattr(page, "file", None), "src_path", "a page")
        raise PluginError(f"{where}: its generated reference is stale: run `make docs-reference`")
    return markdown


def main(argv: list[str]) -> int:
    """Rewrite the pages' references, or with ``--check`` report the stale ones (exit 1)."""
    if "--check" in argv:
        for page in stale_pages():
            print(
                f"docs/{page.name}: reference out of date: run `make docs-reference`",
                file=sys.stderr,
            )
        return 1 if stale_pages() else 0
    for page in PAGES.values():
        path = DOCS / page
        path.write_text(with_references(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

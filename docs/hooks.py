"""References generated from the code, so that they cannot drift from it.

MkDocs runs this file as a hook (``hooks:`` in mkdocs.yml): a page holding one of the markers
below gets, in its place, a Markdown table built from the code's own definitions:

- ``<!-- reference:settings -->``: every setting of :class:`reaper.config.settings.Settings`, from
  its field's metadata (help text, metavar) and default, with its flag, variable and TOML key;
- ``<!-- reference:metrics -->``: every metric of :class:`reaper.metrics.Metrics`, from its
  definition (name as exported, type, labels, help text);
- ``<!-- reference:commands -->``: every command of the ``reaper`` CLI and its own options
  (the settings' flags are in the settings table), from the click definitions.

``tests/unit/project/test_docs.py`` imports the same functions.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import click
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

MARKERS = ("settings", "metrics", "commands")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def settings_table() -> str:
    """The configuration reference: one row per setting, defaults as the CLI shows them."""
    from reaper.cli import _default_text, _envvar
    from reaper.config.settings import SETTING_FIELDS, Settings

    defaults = Settings()
    rows = [
        "| flag | environment | TOML key | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for f in SETTING_FIELDS:
        metavar = f.metadata.get("metavar") or "BOOL"
        flag = "--" + f.name.replace("_", "-")
        rows.append(
            f"| `{flag} {metavar}` | `{_envvar(f.name)}` | `{f.name}` "
            f"| {_cell(_default_text(getattr(defaults, f.name)))} | {_cell(f.metadata['help'])} |"
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

    metrics = Metrics([], CollectorRegistry())
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
    """The metrics reference: name, type, labels, meaning."""
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for m in metric_defs():
        labels = ", ".join(f"`{label}`" for label in m.labels)
        rows.append(f"| `{m.name}` | {m.type} | {labels} | {_cell(m.help)} |")
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
    from reaper.config.settings import SETTING_FIELDS

    settings = {f.name for f in SETTING_FIELDS}
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
            out.append("| option | meaning |\n|---|---|")
            for o in opts:
                names = ", ".join(f"`{n}`" for n in o.opts)
                help_text = _cell(o.help or "")
                if o.envvar:
                    help_text += f" (environment: `{o.envvar}`)"
                out.append(f"| {names} | {help_text} |")
            out.append("")
    return "\n".join(out) + "\n"


RENDER = {"settings": settings_table, "metrics": metrics_table, "commands": commands_table}


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: replace each reference marker with its generated table."""
    for name, render in RENDER.items():
        marker = f"<!-- reference:{name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown

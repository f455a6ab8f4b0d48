"""The Grafana dashboard (deploy/grafana/reaper.json) imports as is, matches its builder and its
ConfigMap, and every panel's query names only metrics reaper exports, with their own labels,
as reaper.metrics defines them (read at test time)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "deploy" / "grafana" / "reaper.json"
PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
    "time",
}


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reaper_docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def exported() -> dict[str, tuple[str, ...]]:
    """Series name -> labels, of every metric reaper.metrics defines."""
    out = {}
    for m in _hooks().metric_defs():
        for series in m.series():
            out[series] = m.labels + (("le",) if series.endswith("_bucket") else ())
    return out


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def queries(doc: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: panels' targets and query variables."""
    out = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    for v in doc["templating"]["list"]:
        if v["type"] == "query":
            out.append(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", v["definition"]))
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, labels and
    Grafana's $variables aside)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", expr)  # grouping labels
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"\$\w+", "", expr)  # Grafana variables
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        rest = expr[m.end() :].lstrip()
        if rest.startswith("(") or m.group(0).lower() in PROMQL_WORDS:
            continue
        names.add(m.group(0))
    return names


def grouping_labels(expr: str) -> set[str]:
    return {
        label.strip()
        for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr)
        for label in group.split(",")
        if label.strip()
    }


def test_the_parser_finds_metric_names() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (sweep, le) (rate(reaper_batch_duration_seconds_bucket"
        '{job=~"$job", sweep=~"a|b"}[$__rate_interval])))'
    )
    assert metric_names(expr) == {"reaper_batch_duration_seconds_bucket"}
    assert metric_names("time() - max by (sweep) (x_total > 0) and on (a) y") == {"x_total", "y"}
    assert grouping_labels(expr) == {"sweep", "le"}


def test_every_query_names_only_metrics_reaper_exports() -> None:
    series = exported()
    for expr in queries(dashboard()):
        names = metric_names(expr)
        assert names, expr
        unknown = names - set(series)
        assert not unknown, f"{expr}: reaper exports no {sorted(unknown)}"
        labels = {label for name in names for label in series[name]}
        assert grouping_labels(expr) <= labels, f"{expr}: no such label"
        assert all(name.startswith("reaper_") for name in names), expr


def test_the_panels_cover_what_operators_watch() -> None:
    exprs = " ".join(queries(dashboard()))
    for name in (
        "reaper_deleted_rows_total",
        "reaper_backlog_rows",
        "reaper_backlog_oldest_seconds",
        "reaper_sweep_runs_total",
        "reaper_batch_duration_seconds_bucket",
        "reaper_throttled_seconds_total",
        "reaper_sweep_last_success_timestamp_seconds",
        "reaper_storage_rows",
    ):
        assert name in exprs, name
    stalled = next(p for p in dashboard()["panels"] if "last successful run" in p["title"])
    steps = stalled["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1]["value"] == 3 * 3600  # ReaperSweepStalled's window


def test_it_imports_as_is() -> None:
    doc = dashboard()
    assert "__inputs" not in doc  # the sidecar cannot fill import-time inputs
    assert doc["uid"] == "reaper" and doc["schemaVersion"] >= 36
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for p in doc["panels"]:
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            assert p["description"], p["title"]
            assert all(t["datasource"] == p["datasource"] for t in p["targets"])


def test_the_dashboard_page_describes_every_panel() -> None:
    text = (ROOT / "docs" / "operations" / "dashboard.md").read_text()
    for p in dashboard()["panels"]:
        if p["type"] != "row":
            assert p["title"] in text, p["title"]


# A metric reaper exports that no panel shows, and why (the dashboard shows everything else).
NO_PANEL: dict[str, str] = {}


def test_every_metric_has_a_panel_or_a_reason() -> None:
    """The dashboard page says it shows everything reaper exports: every metric is in a
    panel's query, or named in NO_PANEL with the reason it is not."""
    used = set().union(*(metric_names(e) for e in queries(dashboard())))
    defs = _hooks().metric_defs()
    assert set(NO_PANEL) <= {m.name for m in defs}
    missing = [m.name for m in defs if m.name not in NO_PANEL and not set(m.series()) & used]
    assert not missing, f"no panel shows {missing}: add one in deploy/grafana/build.py"
    assert "everything reaper" in (ROOT / "docs" / "operations" / "dashboard.md").read_text()

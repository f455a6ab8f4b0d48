"""Write the Kubernetes copies of reaper's settings file, alert rules and dashboard.

deploy/kubernetes/base/configmap.yaml carries deploy/reaper.toml,
deploy/kubernetes/daemon/prometheusrule.yaml carries deploy/prometheus/reaper-rules.yml, and
deploy/kubernetes/grafana/configmap.yaml carries deploy/grafana/reaper.json (for Grafana's
dashboard sidecar), each copied as text (comments included) so that there is one source to
edit.

    python deploy/generate.py          # write both (make deploy-generate)
    python deploy/generate.py --check  # exit 1 when either is out of date
                                       # (tests/process/project/test_deploy.py runs it)
"""

from __future__ import annotations

import sys
from pathlib import Path

DEPLOY = Path(__file__).resolve().parent
SETTINGS = DEPLOY / "reaper.toml"
RULES = DEPLOY / "prometheus" / "reaper-rules.yml"
CONFIGMAP = DEPLOY / "kubernetes" / "base" / "configmap.yaml"
PROMETHEUSRULE = DEPLOY / "kubernetes" / "daemon" / "prometheusrule.yaml"
DASHBOARD = DEPLOY / "grafana" / "reaper.json"
DASHBOARD_CONFIGMAP = DEPLOY / "kubernetes" / "grafana" / "configmap.yaml"

LABELS = """\
  labels:
    app.kubernetes.io/name: reaper
"""


def _indent(text: str, by: int) -> str:
    pad = " " * by
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


def configmap() -> str:
    """The ConfigMap reaper-config whose key reaper.toml is deploy/reaper.toml."""
    return (
        "# Generated from deploy/reaper.toml by `make deploy-generate`: edit that file.\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: reaper-config\n"
        + LABELS
        + "data:\n  reaper.toml: |\n"
        + _indent(SETTINGS.read_text(), 4)
    )


def prometheusrule() -> str:
    """The PrometheusRule reaper whose spec is deploy/prometheus/reaper-rules.yml."""
    text = RULES.read_text()
    groups = text[text.index("\ngroups:") + 1 :]
    return (
        "# Generated from deploy/prometheus/reaper-rules.yml by `make deploy-generate`: edit that\n"
        "# file (and its tests, reaper-rules.test.yml).\n"
        "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: reaper\n"
        + LABELS
        + "spec:\n"
        + _indent(groups, 2)
    )


def dashboard_configmap() -> str:
    """The ConfigMap reaper-dashboard that Grafana's sidecar loads (label grafana_dashboard)."""
    return (
        "# Generated from deploy/grafana/reaper.json by `make deploy-generate`: edit\n"
        "# deploy/grafana/build.py. Grafana's dashboard sidecar (the grafana Helm chart's\n"
        "# sidecar.dashboards) loads every ConfigMap labelled grafana_dashboard: \"1\".\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: reaper-dashboard\n"
        "  labels:\n    app.kubernetes.io/name: reaper\n    grafana_dashboard: \"1\"\n"
        "data:\n  reaper.json: |\n"
        + _indent(DASHBOARD.read_text(), 4)
    )


OUTPUTS = {
    CONFIGMAP: configmap,
    PROMETHEUSRULE: prometheusrule,
    DASHBOARD_CONFIGMAP: dashboard_configmap,
}


def main(argv: list[str]) -> int:
    """Write the outputs, or with ``--check`` report those that differ (exit 1)."""
    stale = []
    for path, render in OUTPUTS.items():
        text = render()
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                stale.append(path.relative_to(DEPLOY.parent))
        else:
            path.write_text(text)
    for path in stale:
        print(f"{path} is out of date: run `make deploy-generate`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

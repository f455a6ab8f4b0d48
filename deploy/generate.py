"""Write the Kubernetes copies of reaper's settings file, alert rules and dashboard, and the
alerts' runbook links.

deploy/kubernetes/base/configmap.yaml carries deploy/reaper.toml,
deploy/kubernetes/rules/prometheusrule.yaml carries deploy/prometheus/reaper-rules.yml, and
deploy/kubernetes/grafana/configmap.yaml carries deploy/grafana/reaper.json (for Grafana's
dashboard sidecar), each copied as text (comments included) so that there is one source to
edit. Every alert's ``runbook_url`` is written too, in both rule files: the absolute address of
its page in the documentation site, ``BASE/operations/ALERT/``, so that a click from
Alertmanager or Grafana opens it. BASE is where the site that ``make docs`` builds is served:
mkdocs.yml's ``site_url`` unless ``--runbook-base`` says otherwise.

    python deploy/generate.py                    # write them all (make deploy-generate)
    python deploy/generate.py --runbook-base https://docs.internal/reaper/
    python deploy/generate.py --check            # exit 1 when one is out of date
                                                 # (tests/process/project/test_deploy.py)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

DEPLOY = Path(__file__).resolve().parent
SETTINGS = DEPLOY / "reaper.toml"
RULES = DEPLOY / "prometheus" / "reaper-rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "reaper-rules.test.yml"
CONFIGMAP = DEPLOY / "kubernetes" / "base" / "configmap.yaml"
PROMETHEUSRULE = DEPLOY / "kubernetes" / "rules" / "prometheusrule.yaml"
DASHBOARD = DEPLOY / "grafana" / "reaper.json"
DASHBOARD_CONFIGMAP = DEPLOY / "kubernetes" / "grafana" / "configmap.yaml"
MKDOCS = DEPLOY.parent / "mkdocs.yml"
RUNBOOKS = "operations"  # docs/operations/ALERT.md, one page per alert

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


def site_url() -> str:
    """mkdocs.yml's ``site_url``: where the documentation site is served, ending in ``/``."""
    m = re.search(r"^site_url:\s*(\S+)\s*$", MKDOCS.read_text(), re.M)
    if m is None:
        raise SystemExit(f"{MKDOCS.name} has no site_url: give --runbook-base URL")
    return m.group(1).rstrip("/") + "/"


def runbook_url(base: str, alert: str) -> str:
    """The address of ``alert``'s runbook page in the site served at ``base`` (mkdocs builds
    docs/operations/ALERT.md as operations/ALERT/index.html)."""
    return f"{base.rstrip('/')}/{RUNBOOKS}/{alert}/"


# An alert's name: a rule's `- alert:` (reaper-rules.yml), a test's `alertname:` (its tests).
_ALERT = re.compile(r"^\s*(?:- alert|alertname):\s*(\w+)\s*$")
_RUNBOOK = re.compile(r"^(\s*runbook_url:\s*).*$")


def with_runbooks(path: Path, base: str) -> str:
    """The rules file (or its tests) at ``path`` with each runbook_url pointing under ``base``."""
    out, alert = [], None
    for line in path.read_text().splitlines(True):
        if m := _ALERT.match(line):
            alert = m.group(1)
        elif (m := _RUNBOOK.match(line)) and alert is not None:
            line = f'{m.group(1)}"{runbook_url(base, alert)}"\n'
        out.append(line)
    return "".join(out)


def prometheusrule(text: str | None = None) -> str:
    """The PrometheusRule reaper whose spec is deploy/prometheus/reaper-rules.yml (or ``text``)."""
    text = RULES.read_text() if text is None else text
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
        '# sidecar.dashboards) loads every ConfigMap labelled grafana_dashboard: "1".\n'
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: reaper-dashboard\n"
        '  labels:\n    app.kubernetes.io/name: reaper\n    grafana_dashboard: "1"\n'
        "data:\n  reaper.json: |\n" + _indent(DASHBOARD.read_text(), 4)
    )


def outputs(base: str) -> dict[Path, str]:
    """Each generated file and its text, the runbook links under ``base``."""
    rules = with_runbooks(RULES, base)
    return {
        RULES: rules,
        RULE_TESTS: with_runbooks(RULE_TESTS, base),
        CONFIGMAP: configmap(),
        PROMETHEUSRULE: prometheusrule(rules),
        DASHBOARD_CONFIGMAP: dashboard_configmap(),
    }


def main(argv: list[str]) -> int:
    """Write the outputs, or with ``--check`` report those that differ (exit 1)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a file is out of date")
    parser.add_argument(
        "--runbook-base",
        metavar="URL",
        help="where the documentation site is served (default: mkdocs.yml's site_url)",
    )
    args = parser.parse_args(argv)
    base = args.runbook_base or site_url()
    if not re.match(r"^https?://[^/\s]+", base):
        parser.error(
            f"--runbook-base {base!r}: give an absolute http(s) URL, e.g. https://docs.internal/reaper/"
        )
    stale = []
    for path, text in outputs(base).items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.relative_to(DEPLOY.parent))
        else:
            path.write_text(text)
    for path in stale:
        print(f"{path} is out of date: run `make deploy-generate`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

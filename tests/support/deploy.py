"""Helpers that the test_deploy.py files of several layers share."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


DEPLOY = ROOT / "deploy"


SYSTEMD = DEPLOY / "systemd"


KUBERNETES = DEPLOY / "kubernetes"


RULES = DEPLOY / "prometheus" / "reaper-rules.yml"


RULE_TESTS = DEPLOY / "prometheus" / "reaper-rules.test.yml"


UNIT_EXEC = "/opt/reaper/bin/reaper"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def missing(what: str, how: str) -> None:
    """Skip (locally) or fail (under CI) because ``what`` is not installed; ``how`` installs it."""
    message = f"{what} is not installed ({how})"
    if in_ci():
        pytest.fail(message + "; CI must install it in .ci/run", pytrace=False)
    pytest.skip(message)


def tool(name: str, how: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing(name, how)
    assert path is not None
    return path


def run(
    *cmd: str | Path, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


def load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def manifests() -> list[Path]:
    """Every Kubernetes manifest (kustomizations aside)."""
    return sorted(p for p in KUBERNETES.rglob("*.yaml") if p.name != "kustomization.yaml")


def kustomizations() -> list[Path]:
    return sorted(KUBERNETES.rglob("kustomization.yaml"))


def one(path: Path) -> dict[str, Any]:
    (doc,) = load_all(path)
    return doc


def pod_specs() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(manifest name, workload, pod spec) of the Deployment and the CronJob."""
    deployment = one(KUBERNETES / "daemon" / "deployment.yaml")
    yield "deployment", deployment, deployment["spec"]["template"]["spec"]
    cronjob = one(KUBERNETES / "cronjob" / "cronjob.yaml")
    yield "cronjob", cronjob, cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def rules() -> list[dict[str, Any]]:
    return [r for g in one(RULES)["groups"] for r in g["rules"]]


_DURATION = {"type": "string", "pattern": r"^(\d+(ms|s|m|h|d|w|y))+$"}


_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"}, "labels": {"type": "object"}},
}


# prometheus-operator's kinds are not in the Kubernetes schemas: these are the parts of their
# CRDs (monitoring.coreos.com/v1) that the manifests use, closed to unknown keys so that a typo
# fails.
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "ServiceMonitor"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", "endpoints"],
                "properties": {
                    "jobLabel": {"type": "string"},
                    "targetLabels": {"type": "array", "items": {"type": "string"}},
                    "selector": {
                        "type": "object",
                        "properties": {"matchLabels": {"type": "object"}},
                    },
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["port"],
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string"},
                                "interval": _DURATION,
                                "scrapeTimeout": _DURATION,
                            },
                        },
                    },
                },
            },
        },
    },
    "PrometheusRule": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PrometheusRule"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["groups"],
                "properties": {
                    "groups": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["name", "rules"],
                            "properties": {
                                "name": {"type": "string"},
                                "interval": _DURATION,
                                "rules": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": ["expr"],
                                        "properties": {
                                            "alert": {"type": "string"},
                                            "record": {"type": "string"},
                                            "expr": {"type": "string"},
                                            "for": _DURATION,
                                            "labels": {
                                                "type": "object",
                                                "additionalProperties": {"type": "string"},
                                            },
                                            "annotations": {
                                                "type": "object",
                                                "additionalProperties": {"type": "string"},
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            },
        },
    },
}

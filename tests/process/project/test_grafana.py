"""The Grafana dashboard (deploy/grafana/reaper.json) imports as is, matches its builder and its
ConfigMap, and every panel's query names only metrics reaper exports, with their own labels,
as reaper.metrics defines them (read at test time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "deploy" / "grafana" / "reaper.json"
CONFIGMAP = ROOT / "deploy" / "kubernetes" / "grafana" / "configmap.yaml"


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def test_the_json_and_the_configmap_are_generated() -> None:
    for script in ("deploy/grafana/build.py", "deploy/generate.py"):
        proc = subprocess.run(
            [sys.executable, str(ROOT / script), "--check"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
    (doc,) = [d for d in yaml.safe_load_all(CONFIGMAP.read_text()) if d]
    assert doc["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(doc["data"]["reaper.json"]) == dashboard()

"""The deployment pages and the files they deploy agree, checked the way an operator uses them:
every kustomization rendered by ``kubectl kustomize`` (each Secret and ConfigMap its pods read
is one that its page creates, or that the build itself carries; each database's objects
select its own pods alone), and the systemd page's steps run in a temporary root (they write
every file the units load)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.deploy import KUBERNETES, ROOT, SYSTEMD, env_of, missing, run

DOCS = ROOT / "docs" / "deployment"
MANY = KUBERNETES / "examples" / "many-databases"
# Each kustomization an operator applies, and the page whose steps create what it references.
APPLIED = {
    KUBERNETES / "daemon": DOCS / "kubernetes.md",
    KUBERNETES / "cronjob": DOCS / "kubernetes.md",
    KUBERNETES / "grafana": ROOT / "docs" / "operations" / "dashboard.md",
    KUBERNETES / "rules": DOCS / "many-databases.md",
    MANY: DOCS / "many-databases.md",
    **{d: DOCS / "many-databases.md" for d in sorted(MANY.iterdir()) if d.is_dir()},
}


# --- the pages' shell steps ----------------------------------------------------------------


def shell_blocks(page: Path) -> list[str]:
    """The ```sh blocks of ``page``, in order."""
    return re.findall(r"^```sh\n(.*?)^```$", page.read_text(), re.M | re.S)


def shell_commands(page: Path) -> list[list[str]]:
    """Every command of the page's sh blocks as words (continuations joined, comments gone)."""
    out = []
    for block in shell_blocks(page):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                out.append(words)
    return out


def created_secrets(page: Path) -> dict[str, set[str]]:
    """{Secret name: its keys} for each ``kubectl create secret generic`` of ``page``."""
    out: dict[str, set[str]] = {}
    for words in shell_commands(page):
        if words[0] != "kubectl" or "secret" not in words:
            continue
        rest = words[words.index("secret") :]
        if rest[:2] != ["secret", "generic"] or words[words.index("secret") - 1] != "create":
            continue
        name, keys = rest[2], set()
        for word in rest[3:]:
            if word.startswith("--from-literal="):
                keys.add(word.removeprefix("--from-literal=").split("=", 1)[0])
            elif word.startswith("--from-file="):
                source = word.removeprefix("--from-file=")
                keys.add(source.split("=", 1)[0] if "=" in source else Path(source).name)
        out[name] = keys
    return out


def test_the_secret_parser_reads_the_pages_forms(tmp_path: Path) -> None:
    page_text = (
        "```sh\nkubectl -n x create secret generic db --from-literal=dsn=service=control \\\n"
        "  --from-file=orders/pg_service.conf --from-file=ca=root.crt   # the CA\n"
        "kubectl -n x get secret other\n```\n"
    )
    page = tmp_path / "page.md"
    page.write_text(page_text)
    assert created_secrets(page) == {"db": {"dsn", "pg_service.conf", "ca"}}


# --- Kubernetes: what each kustomization renders -------------------------------------------


def render(directory: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        missing("kubectl", "any kubectl; it builds the kustomizations")
    assert kubectl is not None
    proc = run(kubectl, "kustomize", directory)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def pods(docs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, pod template) of each workload."""
    for doc in docs:
        spec = doc.get("spec", {})
        if doc["kind"] == "CronJob":
            yield doc, spec["jobTemplate"]["spec"]["template"]
        elif "template" in spec:
            yield doc, spec["template"]


def referenced(pod: dict[str, Any]) -> Iterator[tuple[str, str, str | None]]:
    """(kind, name, key or None) of each Secret and ConfigMap ``pod`` reads: volumes, env,
    envFrom, projected sources."""
    spec = pod["spec"]
    for volume in spec.get("volumes", []):
        if "secret" in volume:
            yield "Secret", volume["secret"]["secretName"], None
        if "configMap" in volume:
            yield "ConfigMap", volume["configMap"]["name"], None
        for source in volume.get("projected", {}).get("sources", []):
            if "secret" in source:
                yield "Secret", source["secret"]["name"], None
            if "configMap" in source:
                yield "ConfigMap", source["configMap"]["name"], None
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        for value in env_of(container).values():
            if isinstance(value, dict) and "secretKeyRef" in value:
                yield "Secret", value["secretKeyRef"]["name"], value["secretKeyRef"]["key"]
            if isinstance(value, dict) and "configMapKeyRef" in value:
                ref = value["configMapKeyRef"]
                yield "ConfigMap", ref["name"], ref["key"]
        for source in container.get("envFrom", []):
            if "secretRef" in source:
                yield "Secret", source["secretRef"]["name"], None
            if "configMapRef" in source:
                yield "ConfigMap", source["configMapRef"]["name"], None


def mounted_files(pod: dict[str, Any], container: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(Secret name, key) of each file of a mounted Secret that an environment variable of
    ``container`` names by path (PGSERVICEFILE, say)."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    mounts = {m["mountPath"].rstrip("/"): volumes[m["name"]] for m in container["volumeMounts"]}
    for value in env_of(container).values():
        if isinstance(value, str) and value.startswith("/"):
            volume = mounts.get(str(Path(value).parent))
            if volume and "secret" in volume:
                yield volume["secret"]["secretName"], Path(value).name


@pytest.mark.parametrize("directory", APPLIED, ids=lambda d: str(d.relative_to(KUBERNETES)))
def test_every_secret_and_configmap_read_is_created(directory: Path) -> None:
    """Each Secret (and key) and ConfigMap a rendered pod reads is created by the page's
    steps or by the render itself: a pod that mounts a Secret nobody creates never starts."""
    docs = render(directory)
    secrets = created_secrets(APPLIED[directory])
    rendered = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for workload, pod in pods(docs):
        where = f"{directory.relative_to(ROOT)}: {workload['kind']} {workload['metadata']['name']}"
        for kind, name, key in referenced(pod):
            if (kind, name) in rendered:
                continue
            assert kind == "Secret", f"{where} reads the {kind} {name}, which nothing creates"
            page = APPLIED[directory].relative_to(ROOT)
            assert name in secrets, f"{where} reads the Secret {name}; {page} creates {secrets}"
            assert key is None or key in secrets[name], f"{where}: {name} has no key {key}"
        for container in pod["spec"]["containers"]:
            for name, key in mounted_files(pod, container):
                assert key in secrets.get(name, set()), f"{where}: {name} has no file {key}"


def selectors(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, str]]]:
    """(kind selected, matchLabels) of each label selector in ``doc``: of pods, except a
    ServiceMonitor's (Services) and a NetworkPolicy's peers (pods that are not this object's)."""
    spec = doc.get("spec", {})
    kind = doc["kind"]
    if kind == "Service":
        yield "Pod", spec.get("selector", {})
    elif kind == "ServiceMonitor":
        yield "Service", spec["selector"].get("matchLabels", {})
    elif kind == "NetworkPolicy":
        yield "Pod", spec["podSelector"].get("matchLabels", {})
    elif kind in ("Deployment", "StatefulSet", "DaemonSet"):
        yield "Pod", spec["selector"]["matchLabels"]
        for constraint in spec["template"]["spec"].get("topologySpreadConstraints", []):
            yield "Pod", constraint["labelSelector"].get("matchLabels", {})
        for terms in spec["template"]["spec"].get("affinity", {}).values():
            for term in terms.get("requiredDuringSchedulingIgnoredDuringExecution", []):
                yield "Pod", term.get("labelSelector", {}).get("matchLabels", {})


INSTANCE = "app.kubernetes.io/instance"


def test_each_database_selects_only_its_own_pods() -> None:
    """In the rendered many-databases example, every selector that picks any reaper pod (or
    Service) picks those of its own database alone: a Deployment's, its spread constraint's,
    a Service's, a NetworkPolicy's, a ServiceMonitor's. The NetworkPolicy's peers still select
    Prometheus, not reaper. The rules come once."""
    docs = render(MANY)
    targets = {
        "Pod": [pod["metadata"]["labels"] for _, pod in pods(docs)],
        "Service": [d["metadata"]["labels"] for d in docs if d["kind"] == "Service"],
    }
    databases = {labels[INSTANCE] for labels in targets["Pod"]}
    assert databases == {d.name for d in MANY.iterdir() if d.is_dir()}
    for doc in docs:
        own = doc["metadata"].get("labels", {}).get(INSTANCE)
        for kind, match in selectors(doc):
            picked = [t for t in targets[kind] if match.items() <= t.items()]
            where = f"{doc['kind']} {doc['metadata']['name']}"
            assert picked, f"{where} selects no {kind}: {match}"
            assert {t[INSTANCE] for t in picked} == {own}, f"{where} selects {kind}s of {picked}"
    for policy in (d for d in docs if d["kind"] == "NetworkPolicy"):
        for rule in policy["spec"]["ingress"]:
            for peer in rule["from"]:
                assert peer["podSelector"]["matchLabels"] == {
                    "app.kubernetes.io/name": "prometheus"
                }, policy["metadata"]["name"]
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "PrometheusRule"] == ["reaper"]
    # Two databases never share a Secret (their service files differ).
    secrets = {}
    for _, pod in pods(docs):
        names = {n for kind, n, _ in referenced(pod) if kind == "Secret"}
        assert len(names) == 1, names
        secrets[pod["metadata"]["labels"][INSTANCE]] = names.pop()
    assert len(set(secrets.values())) == len(secrets), secrets


# --- systemd: the page's steps in a temporary root -------------------------------------------


def systemd_steps(page: Path) -> list[str]:
    """The configuration steps of each sh block of the systemd page: from step 2 (step 1
    installs the wheel) up to the checks of a running unit."""
    out = []
    for block in shell_blocks(page):
        if "# check it" in block:
            block = block[: block.index("# check it")]
        if "# 2." in block:
            block = block[block.index("# 2.") :]
        out.append(block)
    return out


def unit_paths(unit: Path) -> Iterator[tuple[str, str]]:
    """(key, path on the host) of each file ``unit`` loads at start: EnvironmentFile= (not
    the optional ``-`` form) and the sources of LoadCredential=."""
    for raw in unit.read_text().splitlines():
        key, _, value = raw.strip().partition("=")
        if key == "EnvironmentFile" and not value.startswith("-"):
            yield key, value
        elif key == "LoadCredential":
            yield key, value.split(":", 1)[1]


def run_steps(steps: list[str], root: Path, work: Path) -> subprocess.CompletedProcess[str]:
    """Run ``steps`` with bash, /etc moved under ``root``; systemctl and journalctl recorded,
    not run."""
    bin_dir = work / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("systemctl", "journalctl"):
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\necho "$@" >> {work / (name + ".log")}\n')
        stub.chmod(0o755)
    script = "set -euo pipefail\n" + "\n".join(steps).replace("/etc/", f"{root}/etc/")
    return subprocess.run(
        ["bash", "-c", script],
        cwd=work,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_systemd_steps_write_every_file_the_units_load(tmp_path: Path) -> None:
    """The systemd page's steps, run as written in a temporary root, leave every file that
    the units they install load (environment file, credentials) in place, secrets readable by
    root only; the DSN names a service the service file defines, and each file that file
    names exists."""
    root, work = tmp_path / "root", tmp_path / "work"
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    work.mkdir()
    (work / "deploy").symlink_to(ROOT / "deploy")
    (work / "root.crt").write_text("-----BEGIN CERTIFICATE-----\n")  # your CA's, in the page
    proc = run_steps(systemd_steps(DOCS / "systemd.md"), root, work)
    assert proc.returncode == 0, proc.stderr
    units = sorted((root / "etc" / "systemd" / "system").glob("*.service"))
    assert {u.name for u in units} == {p.name for p in SYSTEMD.glob("*.service")}
    for unit in units:
        for key, path in unit_paths(unit):
            target = root / path.lstrip("/")
            assert target.is_file(), f"{unit.name} {key}={path}: the steps do not write it"
            assert target.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
    env = dict(
        line.split("=", 1)
        for line in (root / "etc/reaper/reaper.env").read_text().splitlines()
        if "=" in line
    )
    dsn = env["REAPER_DSN"]
    assert ":" not in dsn and "password" not in dsn, "the password belongs in the service file"
    service = re.fullmatch(r"service=(\w+)", dsn)
    assert service, dsn
    conf = (root / "etc/reaper/pg_service.conf").read_text()
    section = re.search(rf"^\[{service.group(1)}\]\n((?:[^\[].*\n?)*)", conf, re.M)
    assert section, f"pg_service.conf defines no [{service.group(1)}]"
    params = dict(line.split("=", 1) for line in section.group(1).splitlines() if "=" in line)
    assert {"host", "dbname", "user", "password"} <= params.keys()
    assert all(" " not in k for k in params), "libpq reads one parameter a line"
    for key in ("sslrootcert", "sslcert", "sslkey"):
        if key in params:
            assert Path(params[key]).is_relative_to(root), params[key]
            assert Path(params[key]).is_file(), f"{key}={params[key]}: the steps do not write it"
    assert "daemon-reload" in (work / "systemctl.log").read_text()


def test_systemd_steps_check_catches_a_missing_file(tmp_path: Path) -> None:
    """The check above, against steps that forget the service file: a unit loads it."""
    root, work = tmp_path / "root", tmp_path / "work"
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    work.mkdir()
    (work / "deploy").symlink_to(ROOT / "deploy")
    steps = [
        "install -d -m 0755 /etc/reaper",
        "install -m 0600 deploy/reaper.toml /etc/reaper/reaper.toml",
        "(umask 077; echo 'REAPER_DSN=service=control' > /etc/reaper/reaper.env)",
        "install -m 0644 deploy/systemd/reaper.service /etc/systemd/system/",
    ]
    assert run_steps(steps, root, work).returncode == 0
    unit = root / "etc/systemd/system/reaper.service"
    absent = [p for _, p in unit_paths(unit) if not (root / p.lstrip("/")).is_file()]
    assert absent == ["/etc/reaper/pg_service.conf"]

"""deploy/: the systemd units, the Kubernetes manifests, the Dockerfile and the alert rules.

Each check runs the tool an operator (or CI) would: ``systemd-analyze verify`` and
``systemd-analyze security``, ``promtool check rules`` and ``promtool test rules``,
kubernetes-validate against the Kubernetes schemas (offline, shipped in the package), and the
wheel built and installed in a clean virtual environment. Where a tool is missing the test skips
with the reason, except under CI (``CI`` set), where it fails: .ci/run installs them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.deploy import (
    CRD_SCHEMAS,
    DEPLOY,
    KUBERNETES,
    ROOT,
    RULE_TESTS,
    RULES,
    SYSTEMD,
    UNIT_EXEC,
    env_of,
    kustomizations,
    manifests,
    missing,
    one,
    pod_specs,
    run,
    tool,
)

UNITS = ("reaper.service", "reaper-once.service", "reaper-once.timer")
# systemd-analyze security prints the exposure from 0.0 (locked down) to 10.0; "OK" ends at 2.0.
MAX_EXPOSURE = 2.0


# --- systemd -------------------------------------------------------------------------------


def test_systemd_units_verify(tmp_path: Path) -> None:
    """systemd-analyze verify, with ExecStart pointed at this environment's reaper (verify
    checks that the program exists; the units name /opt/reaper/bin/reaper)."""
    analyze = tool("systemd-analyze", "Debian package systemd")
    reaper = shutil.which("reaper", path=str(Path(sys.executable).parent))
    assert reaper, "the reaper entry point is not installed beside this Python"
    for name in UNITS:
        text = (SYSTEMD / name).read_text()
        (tmp_path / name).write_text(text.replace(UNIT_EXEC, reaper))
    proc = run(analyze, "verify", *(tmp_path / n for n in UNITS))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", f"systemd-analyze verify warned:\n{proc.stderr}"


@pytest.mark.parametrize("unit", ["reaper.service", "reaper-once.service"])
def test_systemd_exposure_is_ok(unit: str) -> None:
    analyze = tool("systemd-analyze", "Debian package systemd")
    proc = run(
        analyze,
        "security",
        "--offline=true",
        f"--threshold={int(MAX_EXPOSURE * 10)}",
        SYSTEMD / unit,
    )
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    assert float(m.group(1)) <= MAX_EXPOSURE, proc.stdout
    assert proc.returncode == 0, proc.stdout


def test_kubernetes_copies_are_generated_from_their_sources() -> None:
    proc = run(sys.executable, DEPLOY / "generate.py", "--check")
    assert proc.returncode == 0, proc.stderr
    configmap = one(KUBERNETES / "base" / "configmap.yaml")
    assert configmap["data"]["reaper.toml"] == (DEPLOY / "reaper.toml").read_text()


# --- Prometheus rules ----------------------------------------------------------------------


def test_promtool_check_rules() -> None:
    promtool = tool("promtool", "Debian package prometheus")
    proc = run(promtool, "check", "rules", RULES)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_rule_unit_tests() -> None:
    """Fires when it should; silent for a healthy reaper, one with nothing to delete, and
    across restarts (reaper-rules.test.yml)."""
    promtool = tool("promtool", "Debian package prometheus")
    proc = run(promtool, "test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


# --- Kubernetes ----------------------------------------------------------------------------


def test_kustomizations_cover_every_manifest() -> None:
    """Each kustomization names files that exist, every manifest is in one, and the image
    it sets is the one the workloads use. With kubectl at hand, `kubectl kustomize` builds too."""
    listed: set[Path] = set()
    for k in kustomizations():
        doc = one(k)
        assert doc["kind"] == "Kustomization"
        for res in doc["resources"]:
            target = (k.parent / res).resolve()
            assert target.exists(), f"{k}: {res} does not exist"
            if target.is_file():
                listed.add(target)
        for image in doc.get("images", []):
            assert image["name"] == "reaper"
    assert listed == set(manifests())
    for _, _, pod in pod_specs():
        assert [c["image"] for c in pod["containers"]] == ["reaper"]
    kubectl = shutil.which("kubectl")
    if kubectl:
        for variant in ("daemon", "cronjob"):
            proc = run(kubectl, "kustomize", KUBERNETES / variant)
            assert proc.returncode == 0, proc.stderr
            assert "image: reaper:0.1.0" in proc.stdout


# --- the image: what can be checked without a Docker engine ---------------------------------


def reaper_help(reaper: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run(reaper, *args, "--help")


def test_commands_and_variables_used_by_deploy_exist() -> None:
    """Every `reaper` command and REAPER_* variable the units and manifests use is one the CLI
    knows (shown by --help)."""
    reaper = shutil.which("reaper", path=str(Path(sys.executable).parent))
    assert reaper
    top = reaper_help(reaper)
    assert top.returncode == 0, top.stderr
    used: dict[str, set[str]] = {"run": set(), "run-once": set()}
    for path in [*manifests(), *(SYSTEMD / n for n in UNITS)]:
        text = path.read_text()
        command = "run-once" if "run-once" in path.name or "cronjob" in path.name else "run"
        used[command] |= set(re.findall(r"REAPER_[A-Z_]+", text))
    for command, variables in used.items():
        if not variables:
            continue
        if not re.search(rf"^\s+{re.escape(command)}\s", top.stdout, re.M):
            pytest.skip(f"`reaper {command}` is not in this build")
        proc = reaper_help(reaper, command)
        assert proc.returncode == 0, proc.stderr
        for var in variables:
            assert var in proc.stdout + top.stdout, f"reaper {command} knows no {var}"


def test_wheel_builds_and_entry_point_runs_in_a_clean_venv(tmp_path: Path) -> None:
    """The Dockerfile's steps without Docker: copy what its build stage copies, `pip wheel` it
    (reaper's wheel built, every dependency a ready-made wheel: the slim image has no
    compiler), install from those wheels alone in a fresh virtual environment, run `reaper
    --help` there, and load every SQL file from the installed package."""
    src = tmp_path / "src"
    src.mkdir()
    text = (ROOT / "Dockerfile").read_text()
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.M):
        for name in line.split()[:-1]:
            origin = ROOT / name
            if origin.is_dir():
                shutil.copytree(origin, src / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(origin, src / name)
    wheels = tmp_path / "wheels"
    proc = run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--disable-pip-version-check",
        "--wheel-dir",
        wheels,
        src,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    built = set(re.findall(r"Building wheel for (\S+)", proc.stdout))
    assert built == {"reaper"}, f"built from source, which the slim image cannot: {built}"
    # As the image: a virtual environment without pip, filled by the build stage's pip.
    venv = tmp_path / "venv"
    proc = run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert proc.returncode == 0, proc.stderr
    proc = run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        venv / "bin" / "python",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-index",
        "--find-links",
        wheels,
        "reaper",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(venv.glob("lib/python*/site-packages/pip")), "pip is in the environment"
    reaper = venv / "bin" / "reaper"
    help_ = run(reaper, "--help", cwd=tmp_path)
    assert help_.returncode == 0, help_.stderr
    assert "run-once" in help_.stdout
    assert run(reaper, "run-once", "--help", cwd=tmp_path).returncode == 0
    check = run(
        venv / "bin" / "python",
        "-c",
        "import reaper, reaper.sqltext as s; print(reaper.__file__);"
        " print(sum(1 for n in s.all_files() if s.read(n)))",
        cwd=tmp_path,
    )
    assert check.returncode == 0, check.stderr
    where, count = check.stdout.split()
    assert Path(where).is_relative_to(venv)
    assert int(count) == len(list((ROOT / "sql").rglob("*.sql")))


# --- one reaper per database (deploy/kubernetes/examples/many-databases) --------------------

MANY = KUBERNETES / "examples" / "many-databases"
DATABASES = sorted(p.name for p in MANY.iterdir() if p.is_dir() and p.name != "rules")


def validate_object(doc: dict[str, Any], where: str) -> None:
    """One object against the newest Kubernetes schemas or the CRD subsets above."""
    try:
        import jsonschema
        import kubernetes_validate
        from kubernetes_validate.utils import latest_version
    except ImportError:
        missing("kubernetes-validate", "pip install -e '.[test]'")
    if doc["kind"] in CRD_SCHEMAS:
        jsonschema.validate(doc, CRD_SCHEMAS[doc["kind"]])
        return
    try:
        kubernetes_validate.validate(doc, latest_version(), strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{where}: {doc['kind']} {exc.message}", pytrace=False)


def test_one_reaper_per_database_builds_apart() -> None:
    """The worked example builds (kubectl kustomize), every object validates, and each
    database's reaper is its own: its name, its Secret, its settings, pods that its Service
    and ServiceMonitor alone select, series under job="reaper" told apart by database; the
    alert rules come once."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        # Debian's registry has no kubectl package, so CI cannot install one: skip everywhere.
        pytest.skip("kubectl is not installed (any kubectl; it builds the kustomization)")
    proc = run(kubectl, "kustomize", MANY)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    for doc in docs:
        validate_object(doc, "many-databases")
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    assert len(DATABASES) >= 2
    assert [d["metadata"]["name"] for d in by_kind["PrometheusRule"]] == ["reaper"]
    names = {kind: sorted(d["metadata"]["name"] for d in docs_) for kind, docs_ in by_kind.items()}
    for kind in ("Deployment", "Service", "ServiceMonitor"):
        assert names[kind] == sorted(f"reaper-{db}" for db in DATABASES), kind
    for db in DATABASES:

        def named(kind: str, db: str = db) -> dict[str, Any]:
            return next(d for d in by_kind[kind] if d["metadata"]["name"] == f"reaper-{db}")

        deployment = named("Deployment")
        pod = deployment["spec"]["template"]
        env = env_of(pod["spec"]["containers"][0])
        secret = {"secretKeyRef": {"name": f"reaper-database-{db}", "key": "dsn"}}
        assert env["REAPER_DSN"] == secret
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["config"]["configMap"]["name"] == f"reaper-config-{db}"
        assert f"reaper-config-{db}" in names["ConfigMap"]
        labels = pod["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == db
        # Each selector picks this database's pods or Service, and no other database's.
        service, monitor = named("Service"), named("ServiceMonitor")
        for selector, target in (
            (deployment["spec"]["selector"]["matchLabels"], labels),
            (service["spec"]["selector"], labels),
            (monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]),
        ):
            assert selector.items() <= target.items()
            assert selector["app.kubernetes.io/instance"] == db
        # job = the Service's app.kubernetes.io/name, "reaper", as the rules expect.
        assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "reaper"
        assert monitor["spec"]["targetLabels"] == ["app.kubernetes.io/instance"]

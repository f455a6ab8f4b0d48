"""deploy/: the systemd units, the Kubernetes manifests, the Dockerfile and the alert rules.

Each check runs the tool an operator (or CI) would: ``systemd-analyze verify`` and
``systemd-analyze security``, ``promtool check rules`` and ``promtool test rules``,
kubernetes-validate against the Kubernetes schemas (offline, shipped in the package), and the
wheel built and installed in a clean virtual environment. Where a tool is missing the test skips
with the reason, except under CI (``CI`` set), where it fails: .ci/run installs them.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from reaper.config.load import load_toml
from reaper.config.settings import build_settings
from reaper.config.values import parse_duration
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
    load_all,
    manifests,
    missing,
    one,
    pod_specs,
    rules,
)

# The oldest Kubernetes release still commonly run, and the newest that kubernetes-validate knows.
K8S_VERSIONS = ("1.28.0", "latest")
ALERTS = {
    "ReaperDown",
    "ReaperSweepFailing",
    "ReaperSweepRefused",
    "ReaperSweepStalled",
    "ReaperSweepSkipped",
    "ReaperBacklogGrowing",
    "ReaperDeletingNothing",
    "ReaperClockSkew",
    "ReaperCheckFailing",
    "ReaperSpaceNotReclaimed",
}
SEVERITIES = {"critical", "warning", "info"}


# --- systemd -------------------------------------------------------------------------------


def parse_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A unit file as {section: [(key, value), ...]}, repeated keys kept in order."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            sections.setdefault(current, [])
        else:
            key, _, value = line.partition("=")
            sections[current].append((key.strip(), value.strip()))
    return sections


def unit_values(path: Path, section: str, key: str) -> list[str]:
    return [v for k, v in parse_unit(path).get(section, []) if k == key]


def unit_value(path: Path, section: str, key: str) -> str:
    values = unit_values(path, section, key)
    assert values, f"{path.name}: [{section}] has no {key}="
    return values[-1]


def test_systemd_daemon_unit_settings() -> None:
    unit = SYSTEMD / "reaper.service"
    assert unit_value(unit, "Service", "ExecStart") == f"{UNIT_EXEC} run"
    # Unprivileged, secrets readable by root only (systemd reads them before dropping to the
    # dynamic user), restarts with a delay and a limit, logs to the journal.
    assert unit_value(unit, "Service", "DynamicUser") == "yes"
    assert unit_value(unit, "Service", "EnvironmentFile") == "/etc/reaper/reaper.env"
    assert unit_value(unit, "Service", "LoadCredential").startswith("reaper.toml:/etc/reaper/")
    assert "REAPER_CONFIG=%d/reaper.toml" in unit_values(unit, "Service", "Environment")
    assert unit_value(unit, "Service", "Restart") == "on-failure"
    assert parse_duration(unit_value(unit, "Service", "RestartSec")) >= timedelta(seconds=5)
    assert unit_value(unit, "Unit", "StartLimitBurst")
    assert unit_value(unit, "Service", "RestartPreventExitStatus") == "2"
    assert unit_value(unit, "Service", "StandardOutput") == "journal"
    assert unit_value(unit, "Service", "StandardError") == "journal"
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "PrivateDevices"):
        assert unit_value(unit, "Service", key) == "yes", key
    assert unit_value(unit, "Service", "ProtectSystem") == "strict"
    assert unit_value(unit, "Service", "CapabilityBoundingSet") == ""
    assert "@system-service" in unit_values(unit, "Service", "SystemCallFilter")
    env = dict(v.split("=", 1) for v in unit_values(unit, "Service", "Environment") if " " not in v)
    shutdown = parse_duration(env["REAPER_SHUTDOWN_TIMEOUT"])
    assert parse_duration(unit_value(unit, "Service", "TimeoutStopSec")) > shutdown
    # Bounded: memory, threads, open files.
    assert unit_value(unit, "Service", "MemoryMax")
    assert int(unit_value(unit, "Service", "TasksMax")) <= 128
    assert int(unit_value(unit, "Service", "LimitNOFILE")) <= 4096
    # The password in a service file handed over as a credential, never in the environment.
    assert "PGSERVICEFILE=%d/pg_service.conf" in unit_values(unit, "Service", "Environment")
    assert any(
        v.startswith("pg_service.conf:/etc/reaper/")
        for v in unit_values(unit, "Service", "LoadCredential")
    )


def test_networkpolicy_admits_only_the_scraper_to_the_port() -> None:
    policy = one(KUBERNETES / "daemon" / "networkpolicy.yaml")
    deployment = one(KUBERNETES / "daemon" / "deployment.yaml")
    assert policy["kind"] == "NetworkPolicy"
    assert (
        policy["spec"]["podSelector"]["matchLabels"]
        == deployment["spec"]["selector"]["matchLabels"]
    )
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert all(peer.get("podSelector", {}).get("matchLabels") for peer in rule["from"])


def test_systemd_timer_runs_run_once() -> None:
    service = SYSTEMD / "reaper-once.service"
    assert unit_value(service, "Service", "Type") == "oneshot"
    assert unit_value(service, "Service", "ExecStart") == f"{UNIT_EXEC} run-once"
    assert unit_value(service, "Service", "DynamicUser") == "yes"
    timer = SYSTEMD / "reaper-once.timer"
    assert unit_value(timer, "Timer", "OnCalendar")
    assert unit_value(timer, "Install", "WantedBy") == "timers.target"


def test_settings_file_is_valid() -> None:
    """deploy/reaper.toml (the systemd config and the ConfigMap) loads with reaper's parser."""
    settings = build_settings({}, load_toml(DEPLOY / "reaper.toml"))
    assert settings.batch_size > 0


# --- Prometheus rules ----------------------------------------------------------------------


def test_rule_tests_cover_every_alert_firing_and_silent() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for case in one(RULE_TESTS)["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else silent).add(check["alertname"])
    assert fired == ALERTS
    assert silent == ALERTS


def test_every_alert_has_for_severity_annotations_and_a_runbook() -> None:
    assert {r["alert"] for r in rules()} == ALERTS
    for rule in rules():
        name = rule["alert"]
        assert parse_duration(rule["for"]) >= timedelta(minutes=10), name
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"]), name
        # One runbook page per alert, in the docs site, titled with the alert's name, linked
        # by its absolute address there (a click from Alertmanager or Grafana opens it).
        url = rule["annotations"]["runbook_url"]
        assert url == f"{site_url()}operations/{name}/", name
        page = ROOT / "docs" / "operations" / f"{name}.md"
        assert page.read_text().startswith(f"# {name}\n"), page
        assert f"operations/{name}.md" in (ROOT / "mkdocs.yml").read_text(), f"{name} not in nav"
    assert (
        next(r for r in rules() if r["alert"] == "ReaperDeletingNothing")["labels"]["severity"]
        == "info"
    )


def site_url() -> str:
    """mkdocs.yml's site_url (where the docs site is served), ending in a slash."""
    m = re.search(r"^site_url:\s*(https?://\S+?)/?\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert m, "mkdocs.yml has no absolute site_url"
    return m.group(1) + "/"


def test_rule_tests_expect_the_rules_runbook_links() -> None:
    """The promtool cases expect each alert's runbook_url as the rules write it."""
    for case in one(RULE_TESTS)["tests"]:
        for check in case["alert_rule_test"]:
            for alert in check["exp_alerts"]:
                url = alert["exp_annotations"]["runbook_url"]
                assert url == f"{site_url()}operations/{check['alertname']}/", case["name"]


# Exported by the daemon once its gauge refresh has measured them, not created by
# reaper.metrics.Metrics up front: the rules may name them before they exist here.
DAEMON_METRICS = {
    "reaper_backlog_rows",
    "reaper_backlog_oldest_seconds",
    "reaper_dead_rows",
    "reaper_autovacuum_threshold_rows",
}


def test_rules_use_the_metrics_and_labels_reaper_exports() -> None:
    """A metric or label misspelt in a rule would leave it silent forever: check the names
    against what reaper exports (a fresh registry holds every label set from the start)."""
    from prometheus_client import CollectorRegistry

    from reaper.metrics import Metrics
    from tests.support import BUILTIN_SWEEPS

    exported: dict[str, set[frozenset[str]]] = {}
    for family in Metrics(BUILTIN_SWEEPS, CollectorRegistry()).registry.collect():
        for sample in family.samples:
            exported.setdefault(sample.name, set()).add(frozenset(sample.labels))
    used = {n for r in rules() for n in re.findall(r"\breaper_[a-z_]+\b", r["expr"])}
    assert used - set(exported) <= DAEMON_METRICS, used - set(exported)
    assert exported["reaper_sweep_runs_total"] == {frozenset({"sweep", "outcome"})}
    assert exported["reaper_deleted_rows_total"] == {frozenset({"table", "reason"})}
    assert exported["reaper_storage_rows"] == {frozenset({"table"})}
    outcomes = set(re.findall(r'outcome="(\w+)"', " ".join(r["expr"] for r in rules())))
    # "refused": a run stopped on purpose before its first delete (ReaperSweepRefused).
    assert outcomes <= {"success", "failure", "skipped", "refused"}


def test_prometheusrule_carries_the_same_rules() -> None:
    rule = one(KUBERNETES / "rules" / "prometheusrule.yaml")
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"] == one(RULES)


# --- Kubernetes ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("path", manifests(), ids=lambda p: str(p.relative_to(KUBERNETES)))
def test_manifest_validates(path: Path, version: str) -> None:
    """Built-in kinds against the Kubernetes schemas (strict: unknown keys fail); the
    prometheus-operator kinds against the subset of their CRDs above."""
    try:
        import jsonschema
        import kubernetes_validate
        from kubernetes_validate.utils import latest_version
    except ImportError:
        missing("kubernetes-validate", "pip install -e '.[test]'")
    docs = load_all(path)
    assert docs, f"{path} holds no object"
    for doc in docs:
        if doc["kind"] in CRD_SCHEMAS:
            jsonschema.validate(doc, CRD_SCHEMAS[doc["kind"]])
            continue
        wanted = latest_version() if version == "latest" else version
        try:
            kubernetes_validate.validate(doc, wanted, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{path.name}: {doc['kind']} {where}: {exc.message}", pytrace=False)


def dockerfile_user() -> int:
    users = re.findall(r"^USER\s+(\d+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert users, "the Dockerfile sets no numeric USER"
    return int(users[-1].split(":")[0])


@pytest.mark.parametrize("name", ["deployment", "cronjob"])
def test_pod_security_settings(name: str) -> None:
    """Non-root (the Dockerfile's uid), read-only root filesystem, no capabilities, no
    privilege escalation, seccomp RuntimeDefault, requests and limits: the Pod Security
    Standards' "restricted" profile."""
    _, workload, pod = next(p for p in pod_specs() if p[0] == name)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == dockerfile_user() != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        res = c["resources"]
        for kind in ("cpu", "memory"):
            assert res["requests"][kind] and res["limits"][kind], kind
        env = env_of(c)
        assert env["REAPER_DSN"] == {"secretKeyRef": {"name": "reaper-database", "key": "dsn"}}
        config_dir = str(Path(env["REAPER_CONFIG"]).parent)
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes[mounts[config_dir]]["configMap"]["name"] == "reaper-config"
        # The password: in libpq's service file, a Secret mounted as a file readable by the
        # pod's group only; in no environment variable.
        secret_dir = str(Path(env["PGSERVICEFILE"]).parent)
        secret = volumes[mounts[secret_dir]]["secret"]
        assert secret["secretName"] == "reaper-database" and secret["defaultMode"] == 0o440
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
        assert not any("PASSWORD" in name for name in env)
    assert workload["metadata"]["labels"]["app.kubernetes.io/name"] == "reaper"


def test_deployment_probes_replicas_and_grace_period() -> None:
    deployment = one(KUBERNETES / "daemon" / "deployment.yaml")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"] == ["run"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    env = env_of(c)
    port = int(env["REAPER_LISTEN"].rsplit(":", 1)[1])
    assert c["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
    shutdown = parse_duration(env["REAPER_SHUTDOWN_TIMEOUT"])
    assert timedelta(seconds=pod["terminationGracePeriodSeconds"]) > shutdown
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = one(KUBERNETES / "daemon" / "service.yaml")
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    monitor = one(KUBERNETES / "daemon" / "servicemonitor.yaml")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    # The alert rules select job="reaper": the ServiceMonitor's job label is the Service name.
    assert service["metadata"]["name"] == "reaper" and "jobLabel" not in monitor["spec"]
    assert f"EXPOSE {port}" in (ROOT / "Dockerfile").read_text()


def test_cronjob_runs_run_once_without_overlap() -> None:
    cronjob = one(KUBERNETES / "cronjob" / "cronjob.yaml")
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert [c["args"] for c in pod["containers"]] == [["run-once"]]
    assert pod["restartPolicy"] == "Never"


# --- the image: what can be checked without a Docker engine ---------------------------------


def dockerfile_stages() -> list[tuple[str, str]]:
    """The Dockerfile's stages as (base image, instructions), build arguments' defaults
    substituted."""
    text = (ROOT / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    parts = re.split(r"^FROM\s+(\S+).*$", text, flags=re.M)[1:]
    bases = [re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], b) for b in parts[0::2]]
    return list(zip(bases, parts[1::2], strict=True))


def test_dockerfile_shape() -> None:
    """A base pinned by digest and exact version, the same for both stages; a numeric
    unprivileged user; in the image that runs, reaper in a virtual environment without pip,
    and pip, setuptools and wheel removed from the base: nothing that installs or builds."""
    text = (ROOT / "Dockerfile").read_text()
    stages = dockerfile_stages()
    assert len(stages) == 2, [b for b, _ in stages]
    bases = {b for b, _ in stages}
    assert len(bases) == 1, bases
    (base,) = bases
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", base), base
    build, final = (body for _, body in stages)
    assert "python -m venv --without-pip /opt/reaper" in build
    assert "--no-index --find-links /wheels reaper" in build
    assert "COPY --from=build /opt/reaper /opt/reaper" in final
    assert "pip uninstall --yes --quiet pip setuptools wheel" in final
    assert not re.search(r"\b(pip|apt-get|apk) install\b", final), "the final stage installs"
    assert dockerfile_user() != 0
    assert re.search(r"^ENV .*PATH=/opt/reaper/bin:\$PATH", final, re.M | re.S)
    assert re.search(r'^ENTRYPOINT \["reaper"\]$', text, re.M)
    assert re.search(r'^CMD \["run"\]$', text, re.M)


# --- one reaper per database (deploy/kubernetes/examples/many-databases) --------------------

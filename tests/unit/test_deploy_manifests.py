"""``make validate-deploy`` (deploy/validate.py) passes on the repository's manifests and fails on
broken copies of them, so the check cannot pass silently; and the KEDA triggers name the consumer
group and the topics each service really consumes (its ``topics_in()``)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from threadline.config import Settings
from threadline.topics import Topics

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
COMPOSE = ROOT / "compose.yaml"


def _load_validator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_validate", ROOT / "deploy" / "validate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


validate = _load_validator()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of deploy/k8s and compose.yaml to break."""
    shutil.copytree(K8S, tmp_path / "k8s")
    shutil.copy(COMPOSE, tmp_path / "compose.yaml")
    return tmp_path


def _edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, count))


def _run(tree: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    """The whole check (``main``) over the copy, against the oldest Kubernetes only (speed)."""
    rc = validate.main(["--k8s", str(tree / "k8s"), "--compose", str(tree / "compose.yaml"),
                        "--kubernetes-version", validate.OLDEST_KUBERNETES, *extra])
    return rc, capsys.readouterr().out


def _rules(tree: Path) -> str:
    """Only the project's rules over the copy's files (no schema, no kubectl: fast)."""
    docs, problems, _ = validate.load_k8s(tree / "k8s", kustomize=False)
    assert problems == []
    return "\n".join(validate.check_rules([d for _, d in docs]))


def test_the_repository_passes_through_make_s_command() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "deploy" / "validate.py")], capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "validate-deploy: ok" in run.stdout


def test_an_unchanged_copy_passes(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(tree, capsys)
    assert rc == 0, out


@pytest.mark.parametrize(("file", "old", "new", "expected"), [
    # a Kubernetes field misspelt: the strict schema refuses it
    ("processor-worker.yaml", "livenessProbe:", "livenesProbe:", "'livenesProbe' was unexpected"),
    # a wrong type
    ("ingress.yaml", "terminationGracePeriodSeconds: 20", "terminationGracePeriodSeconds: twenty", "'twenty' is not of type"),
    # a KEDA field misspelt, and a trigger value that is not a string (KEDA's CRD schema)
    ("keda.yaml", "maxReplicaCount: 12", "maxReplicas: 12", "'maxReplicas' was unexpected"),
    ("keda.yaml", 'lagThreshold: "50"', "lagThreshold: 50", "50 is not of type 'string'"),
])
def test_a_schema_violation_fails(tree: Path, capsys: pytest.CaptureFixture[str], file: str, old: str, new: str,
                                  expected: str) -> None:
    _edit(tree / "k8s" / file, old, new)
    rc, out = _run(tree, capsys)
    assert rc == 1
    assert expected in out, out


@pytest.mark.parametrize(("file", "old", "new", "expected"), [
    ("run-orchestrator.yaml", "terminationGracePeriodSeconds: 20", "terminationGracePeriodSeconds: 10",
     "terminationGracePeriodSeconds must be >= 20"),
    ("processor-worker.yaml", "httpGet: {path: /readyz, port: metrics}", "httpGet: {path: /healthz, port: metrics}",
     "readinessProbe must be httpGet /readyz"),
    ("notification-scheduler.yaml", 'prometheus.io/port: "9464"', 'prometheus.io/port: "9100"',
     "annotation prometheus.io/port must be '9464'"),
    ("configmap.yaml", 'THREADLINE_METRICS_PORT: "9464"', 'THREADLINE_METRICS_PORT: "9465"',
     "container port 'metrics' must be 9465"),
    ("keda.yaml", "consumerGroup: threadline.processor-worker", "consumerGroup: threadline.processor_worker",
     "consumerGroup must be 'threadline.processor-worker'"),
    ("configmap.yaml", 'THREADLINE_PARTITIONS: "12"', 'THREADLINE_PARTITIONS: "6"',
     "maxReplicaCount must be <= THREADLINE_PARTITIONS (6)"),
    ("keda.yaml", "minReplicaCount: 1", "minReplicaCount: 0", "minReplicaCount must be >= 1"),
    ("keda.yaml", "minReplicaCount: 2", "minReplicaCount: 13", "minReplicaCount (13) must be <= maxReplicaCount (12)"),
    ("keda.yaml", "name: threadline-ingress\n  minReplicaCount", "name: threadline-ingres\n  minReplicaCount",
     "no ScaledObject scales it"),
    ("processor-worker.yaml", "  strategy:", "  replicas: 3\n  strategy:", "sets replicas"),
    ("ingress.yaml", "runAsNonRoot: true", "runAsNonRoot: false", "runAsNonRoot must be true"),
    ("run-orchestrator.yaml", "seccompProfile: {type: RuntimeDefault}", "seccompProfile: {type: Unconfined}",
     "seccompProfile.type must be RuntimeDefault"),
    ("processor-worker.yaml", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true",
     "allowPrivilegeEscalation must be false"),
    ("notification-scheduler.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false",
     "readOnlyRootFilesystem must be true"),
    ("ingress.yaml", "capabilities: {drop: [ALL]}", "capabilities: {drop: [NET_RAW]}", "must drop ALL capabilities"),
    ("keda.yaml", "    - type: cpu\n", "    - type: memory\n", "ScaledObject threadline-gateway: triggers[0]: must be type cpu"),
    ("keda.yaml", "  minReplicaCount: 2\n  maxReplicaCount: 20", "  minReplicaCount: 0\n  maxReplicaCount: 20",
     "ScaledObject threadline-gateway: minReplicaCount must be >= 1"),
    ("gateway.yaml", "httpGet: {path: /readyz, port: metrics}", "httpGet: {path: /readyz, port: http}",
     "Deployment threadline-gateway: readinessProbe must be httpGet /readyz on port 'metrics'"),
])
def test_a_broken_project_rule_fails(tree: Path, file: str, old: str, new: str, expected: str) -> None:
    assert _rules(tree) == ""
    _edit(tree / "k8s" / file, old, new)
    assert expected in _rules(tree)


def test_a_budget_selecting_other_pods_fails(tree: Path) -> None:
    path = tree / "k8s" / "ingress.yaml"
    head, pdb = path.read_text().split("kind: PodDisruptionBudget", 1)
    pdb = pdb.replace("app.kubernetes.io/name: threadline-ingress", "app.kubernetes.io/name: someone-else")
    path.write_text(head + "kind: PodDisruptionBudget" + pdb)
    assert "Deployment threadline-ingress: no PodDisruptionBudget selects its pods" in _rules(tree)


def test_a_file_left_out_of_the_kustomization_fails(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(tree / "k8s" / "kustomization.yaml", "  - keda.yaml\n", "")
    rc, out = _run(tree, capsys)
    assert rc == 1
    assert "keda.yaml: not listed in kustomization.yaml" in out
    assert "no ScaledObject scales it" in out  # and the rendered set misses the autoscaling


def test_without_kubectl_the_listed_files_are_validated(tree: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THREADLINE_KUSTOMIZE", "files")
    rc, out = _run(tree, capsys)
    assert rc == 0, out
    assert "the files kustomization.yaml lists, no kustomize" in out
    _edit(tree / "k8s" / "ingress.yaml", "livenessProbe:", "livenesProbe:")
    rc, out = _run(tree, capsys)
    assert rc == 1
    assert "'livenesProbe' was unexpected" in out


def test_an_unknown_kind_fails(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "k8s" / "monitor.yaml").write_text("apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\n"
                                               "metadata: {name: threadline}\nspec: {}\n")
    _edit(tree / "k8s" / "kustomization.yaml", "  - keda.yaml\n", "  - keda.yaml\n  - monitor.yaml\n")
    rc, out = _run(tree, capsys)
    assert rc == 1
    assert "Couldn't find schema for kind ServiceMonitor" in out


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("stop_grace_period: 20s", "stop_grace_period: 12s", "stop_grace_period must be >= 20s"),
    ("9464/readyz'", "9464/healthz'", "healthcheck must ask /readyz"),
    ('THREADLINE_METRICS_PORT: "9464"', 'THREADLINE_METRIC_PORT: "9464"', "THREADLINE_METRICS_PORT is not set"),
    ("    start_period: 120s\n", "    start_period: 120s\n    intervall: 5s\n",  # not a compose field
     "(compose-spec schema): services.ingress.healthcheck: 'intervall' does not match"),
    ("restart: unless-stopped", "restart: [unless-stopped]", "(compose-spec schema): services.ingress.restart"),
    ("services:\n", "services: [\n", "cannot be read"),
])
def test_a_broken_compose_file_fails(tree: Path, old: str, new: str, expected: str) -> None:
    assert validate.check_compose(tree / "compose.yaml") == []
    _edit(tree / "compose.yaml", old, new)
    assert expected in "\n".join(validate.check_compose(tree / "compose.yaml"))


def test_make_exits_non_zero_on_a_broken_compose_file(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(tree / "compose.yaml", "stop_grace_period: 20s", "stop_grace_period: 12s")
    rc, out = _run(tree, capsys)
    assert rc == 1
    assert "FAIL" in out and "stop_grace_period must be >= 20s" in out


def _services() -> dict[str, Any]:
    from threadline.services.ingress.service import Ingress
    from threadline.services.notification_scheduler.service import NotificationScheduler
    from threadline.services.processor_worker.service import ProcessorWorker
    from threadline.services.run_orchestrator.service import RunOrchestrator
    return {cls.name: cls for cls in (Ingress, RunOrchestrator, ProcessorWorker, NotificationScheduler)}


def test_keda_triggers_follow_each_service_s_group_and_topics() -> None:
    docs = [d for f in K8S.glob("*.yaml") for d in yaml.safe_load_all(f.read_text()) if d]
    env = next(d["data"] for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "threadline-env")
    topics = Topics(env["THREADLINE_TOPIC_PREFIX"])
    scaled = {d["spec"]["scaleTargetRef"]["name"]: d for d in docs if d["kind"] == "ScaledObject"}
    settings = Settings(topic_prefix=env["THREADLINE_TOPIC_PREFIX"])
    for name, cls in _services().items():
        service = cls.__new__(cls)  # topics_in() reads only these two; no connection is made
        service.settings, service.topics = settings, topics
        so = scaled[f"threadline-{name.replace('_', '-')}"]
        triggers = so["spec"]["triggers"]
        assert {t["metadata"]["consumerGroup"] for t in triggers} == {topics.group(name.replace("_", "-"))}
        assert sorted(t["metadata"]["topic"] for t in triggers) == sorted(service.topics_in()), name
        assert so["spec"]["maxReplicaCount"] == int(env["THREADLINE_PARTITIONS"]) == Settings().partitions


def test_the_http_services_are_the_ones_validate_scales_on_cpu() -> None:
    from threadline.services import HTTP

    assert tuple(validate.HTTP_SERVICES) == HTTP

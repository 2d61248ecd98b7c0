"""Validate the deployment files, offline, in a few seconds (``make validate-deploy``).

    python deploy/validate.py [--k8s deploy/k8s] [--compose compose.yaml] [--kubernetes-version 1.29.0 ...]

* **Kubernetes** (``--k8s``): the documents ``kubectl kustomize`` renders from the folder when
  kubectl is installed, else (or with ``THREADLINE_KUSTOMIZE=files``) the documents of the files
  its ``kustomization.yaml`` lists, where every ``*.yaml`` of the folder must be listed and exist.
  Each document is validated against the Kubernetes OpenAPI schemas that the PyPI package
  ``kubernetes-validate`` ships (strict: an unknown field is an error), for every version given
  (default: :data:`OLDEST_KUBERNETES` and the newest the package knows); a KEDA ``ScaledObject``
  against the CRD schema checked in under ``deploy/schemas/`` (unknown fields are errors there
  too); a kind with no schema is an error. Then the project's rules (:func:`check_rules`): probes
  on the ``metrics`` port, resources, the grace period of decision 44, Prometheus annotations, a
  PodDisruptionBudget and a ScaledObject on the consumer group's lag per service, the replica
  ceiling at ``THREADLINE_PARTITIONS``.
* **compose** (``--compose``): against the compose-spec schema that ``check-jsonschema`` ships
  (``vendor.compose-spec``, read from the package),
  then every Threadline service has a ``/readyz`` healthcheck, ``THREADLINE_METRICS_PORT`` and a
  stop grace period of at least :data:`MIN_GRACE_S`. (``docker compose config`` is run by the
  Makefile when a compose CLI is installed.)

Prints one line per problem and exits 1 when there is any, else prints a summary and exits 0.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

# kubernetes-validate (pinned in uv.lock) reads and parses its ~1 MB definitions file again for
# every document; read each schema file once per process instead (5 s -> 1 s here). The parsed
# schemas are only read by the validators, never changed.
_utils: Any = kubernetes_validate.utils
_utils.schema_contents = functools.lru_cache(maxsize=None)(_utils.schema_contents)

ROOT = Path(__file__).resolve().parent.parent
KEDA_SCHEMA = ROOT / "deploy" / "schemas" / "keda-scaledobject-v1alpha1.json"
OLDEST_KUBERNETES = "1.29.0"
"""The oldest Kubernetes the manifests are checked against (``policy/v1`` PodDisruptionBudget
with ``unhealthyPodEvictionPolicy``, ``autoscaling/v2`` behind KEDA)."""
_CHECK_JSONSCHEMA = importlib.util.find_spec("check_jsonschema")  # located, not imported (its CLI takes seconds)
assert _CHECK_JSONSCHEMA is not None and _CHECK_JSONSCHEMA.origin is not None, "uv sync: check-jsonschema is missing"
COMPOSE_SCHEMA = Path(_CHECK_JSONSCHEMA.origin).parent / "builtin_schemas" / "vendor" / "compose-spec.json"
"""The compose-spec schema as check-jsonschema ships it (its ``--builtin-schema vendor.compose-spec``)."""
MIN_GRACE_S = 20
"""Decision 44: a SIGTERM'd service exits within 15 s; the platform must wait longer than that."""
SERVICE_COMMAND = re.compile(r"threadline\.services\.([a-z_]+)")

Doc = dict[str, Any]


# ---------------------------------------------------------------- loading


def _load_yaml_docs(path: Path) -> list[Doc]:
    with path.open() as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def load_k8s(k8s_dir: Path, *, kustomize: bool = True) -> tuple[list[tuple[str, Doc]], list[str], str]:
    """Render ``k8s_dir``: ``([(source, document)], problems, how)``; ``how`` says which renderer
    ran: ``kubectl kustomize`` when ``kustomize`` is true, kubectl is installed and
    ``THREADLINE_KUSTOMIZE`` is not ``files``, else the documents of the listed files.
    Problems: kustomize failing, a file not YAML, a listed file missing, a ``*.yaml`` not listed."""
    kustomization = k8s_dir / "kustomization.yaml"
    try:
        listed = (yaml.safe_load(kustomization.read_text()) or {}).get("resources") or []
    except (OSError, yaml.YAMLError) as exc:
        return [], [f"{kustomization}: cannot be read: {exc}"], "none"
    problems = [f"{kustomization}: lists {name}, which does not exist" for name in listed
                if not (k8s_dir / name).is_file()]
    on_disk = {p.name for p in k8s_dir.glob("*.yaml")} - {"kustomization.yaml"}
    problems += [f"{k8s_dir / name}: not listed in kustomization.yaml (kubectl apply -k would skip it)"
                 for name in sorted(on_disk - set(listed))]
    kubectl = shutil.which("kubectl")
    if not kustomize or kubectl is None or os.environ.get("THREADLINE_KUSTOMIZE") == "files":
        docs: list[tuple[str, Doc]] = []
        for name in listed:
            if (k8s_dir / name).is_file():
                try:
                    docs += [(str(k8s_dir / name), d) for d in _load_yaml_docs(k8s_dir / name)]
                except yaml.YAMLError as exc:
                    problems.append(f"{k8s_dir / name}: not YAML: {exc}")
        return docs, problems, "the files kustomization.yaml lists, no kustomize"
    run = subprocess.run([kubectl, "kustomize", str(k8s_dir)], capture_output=True, text=True, timeout=60, check=False)
    if run.returncode != 0:
        return [], [*problems, f"kubectl kustomize {k8s_dir} failed: {run.stderr.strip()}"], "kubectl kustomize"
    rendered = [d for d in yaml.safe_load_all(run.stdout) if d is not None]
    return [(f"kustomize:{d.get('kind')}/{(d.get('metadata') or {}).get('name')}", d) for d in rendered], problems, \
        "kubectl kustomize"


# ---------------------------------------------------------------- schemas


def _closed(schema: Any) -> Any:
    """A copy of a CRD schema where an object with ``properties`` admits no other field, as the
    strict Kubernetes schemas (the API server would silently drop such a field)."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def keda_validator(path: Path = KEDA_SCHEMA) -> jsonschema.protocols.Validator:
    """A validator for ``keda.sh/v1alpha1`` ScaledObjects from the checked-in CRD schema."""
    schema = _closed(json.loads(path.read_text()))
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top)"


def check_schemas(docs: list[tuple[str, Doc]], versions: list[str]) -> list[str]:
    """Every document against its schema, for each Kubernetes version in ``versions``."""
    problems: list[str] = []
    keda = keda_validator()
    for source, doc in docs:
        what = f"{source} {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
        if not isinstance(doc.get("apiVersion"), str) or not isinstance(doc.get("kind"), str):
            problems.append(f"{what}: apiVersion and kind are required")
            continue
        if doc["apiVersion"] == "keda.sh/v1alpha1" and doc["kind"] == "ScaledObject":
            problems += [f"{what} (KEDA CRD schema): {_where(e)}: {e.message}"
                         for e in sorted(keda.iter_errors(doc), key=lambda e: list(e.absolute_path))]
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(copy.deepcopy(doc), version, strict=True)
            except kubernetes_validate.ValidationError as e:
                problems.append(f"{what} (Kubernetes {e.version}): {_where(e)}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError as e:
                problems.append(f"{what}: {e.message}; add its schema to deploy/validate.py")
                break
    return problems


# ---------------------------------------------------------------- the project's rules


def _named(docs: list[Doc], kind: str) -> dict[str, Doc]:
    return {(d.get("metadata") or {}).get("name", ""): d for d in docs if d.get("kind") == kind}


def _probe(container: Doc, which: str, path: str | None, port_name: str) -> str | None:
    probe = container.get(which)
    if not isinstance(probe, dict):
        return f"no {which}"
    get = probe.get("httpGet") or {}
    if get.get("port") != port_name or (path is not None and get.get("path") != path):
        return f"{which} must be httpGet {path or '<path>'} on port {port_name!r}, is {get or probe}"
    return None


def _deployment_problems(name: str, dep: Doc, env: dict[str, str]) -> list[str]:
    out: list[str] = []
    pod = ((dep.get("spec") or {}).get("template") or {})
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or [{}]
    main = containers[0]
    port = env.get("THREADLINE_METRICS_PORT")
    if port is None:
        out.append("THREADLINE_METRICS_PORT is not set in the threadline-env ConfigMap")
    ports = {p.get("name"): p.get("containerPort") for p in main.get("ports") or []}
    if port is not None and str(ports.get("metrics")) != port:
        out.append(f"container port 'metrics' must be {port} (THREADLINE_METRICS_PORT), is {ports.get('metrics')}")
    for which, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", None)):
        if (problem := _probe(main, which, path, "metrics")) is not None:
            out.append(problem)
    resources = main.get("resources") or {}
    for key in ("requests.cpu", "requests.memory", "limits.memory"):
        group, item = key.split(".")
        if not (resources.get(group) or {}).get(item):
            out.append(f"resources.{key} is not set")
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if not isinstance(grace, int) or grace < MIN_GRACE_S:
        out.append(f"terminationGracePeriodSeconds must be >= {MIN_GRACE_S} (decision 44), is {grace}")
    out += _security_problems(spec, main)
    notes = (pod.get("metadata") or {}).get("annotations") or {}
    want = {"prometheus.io/scrape": "true", "prometheus.io/port": port, "prometheus.io/path": "/metrics"}
    for key, value in want.items():
        if notes.get(key) != value:
            out.append(f"annotation {key} must be {value!r}, is {notes.get(key)!r}")
    return [f"Deployment {name}: {p}" for p in out]


def _scaled_object_problems(name: str, so: Doc, service: str, env: dict[str, str]) -> list[str]:
    out: list[str] = []
    spec = so.get("spec") or {}
    prefix = env.get("THREADLINE_TOPIC_PREFIX", "threadline")
    partitions = int(env.get("THREADLINE_PARTITIONS", "12"))
    low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    if not isinstance(low, int) or low < 1:
        out.append(f"minReplicaCount must be >= 1 (a service has work without records), is {low}")
    if not isinstance(high, int) or high > partitions:
        out.append(f"maxReplicaCount must be <= THREADLINE_PARTITIONS ({partitions}): a consumer beyond the "
                   f"partition count gets nothing, is {high}")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        out.append(f"minReplicaCount ({low}) must be <= maxReplicaCount ({high}) (KEDA's CRD rule)")
    group = f"{prefix}.{service.replace('_', '-')}"
    for i, trigger in enumerate(spec.get("triggers") or []):
        meta = trigger.get("metadata") or {}
        at = f"triggers[{i}]"
        if trigger.get("type") != "kafka":
            out.append(f"{at}: type must be kafka (the consumer group's lag), is {trigger.get('type')!r}")
            continue
        if meta.get("consumerGroup") != group:
            out.append(f"{at}: consumerGroup must be {group!r} (<THREADLINE_TOPIC_PREFIX>.<service>), "
                       f"is {meta.get('consumerGroup')!r}")
        if not str(meta.get("topic", "")).startswith(f"{prefix}."):
            out.append(f"{at}: topic must be one of the service's topics ({prefix}.*), is {meta.get('topic')!r}")
        from_env = meta.get("bootstrapServersFromEnv")
        if not meta.get("bootstrapServers") and from_env not in env:
            out.append(f"{at}: bootstrapServers, or bootstrapServersFromEnv naming a ConfigMap key, is required")
        if not re.fullmatch(r"[1-9][0-9]*", str(meta.get("lagThreshold", ""))):
            out.append(f"{at}: lagThreshold must be a positive integer, is {meta.get('lagThreshold')!r}")
    return [f"ScaledObject {name}: {p}" for p in out]


def _security_problems(spec: Doc, container: Doc) -> list[str]:
    """Decision 63: the "restricted" Pod Security Standard's settings, stated in the manifest."""
    out: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    if pod_sc.get("runAsNonRoot") is not True:
        out.append("securityContext.runAsNonRoot must be true")
    if (pod_sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        out.append("securityContext.seccompProfile.type must be RuntimeDefault")
    sc = container.get("securityContext") or {}
    if sc.get("allowPrivilegeEscalation") is not False:
        out.append("the container's allowPrivilegeEscalation must be false")
    if sc.get("readOnlyRootFilesystem") is not True:
        out.append("the container's readOnlyRootFilesystem must be true")
    if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
        out.append("the container must drop ALL capabilities")
    return out


HTTP_SERVICES = ("gateway",)
"""Services that consume no topic (threadline.services.HTTP): scaled on CPU, not on a group's lag."""


def _http_scaled_object_problems(name: str, so: Doc) -> list[str]:
    """An HTTP service's ScaledObject: CPU utilization triggers (it has no consumer group, no lag)."""
    out: list[str] = []
    spec = so.get("spec") or {}
    low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    if not isinstance(low, int) or low < 1:
        out.append(f"minReplicaCount must be >= 1 (an HTTP service serves without load), is {low}")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        out.append(f"minReplicaCount ({low}) must be <= maxReplicaCount ({high}) (KEDA's CRD rule)")
    triggers = spec.get("triggers") or []
    if not triggers:
        out.append("no trigger")
    for i, trigger in enumerate(triggers):
        if trigger.get("type") != "cpu" or trigger.get("metricType") != "Utilization":
            out.append(f"triggers[{i}]: must be type cpu with metricType Utilization (no consumer group to follow), "
                       f"is {trigger.get('type')!r}")
    return [f"ScaledObject {name}: {p}" for p in out]


def check_rules(docs: list[Doc]) -> list[str]:
    """The project's rules over rendered manifests (one line per broken rule)."""
    problems: list[str] = []
    env = {str(k): str(v) for k, v in ((_named(docs, "ConfigMap").get("threadline-env") or {}).get("data") or {}).items()}
    pdbs = list(_named(docs, "PodDisruptionBudget").values())
    scaled = {((d.get("spec") or {}).get("scaleTargetRef") or {}).get("name"): (n, d)
              for n, d in _named(docs, "ScaledObject").items()}
    services = 0
    for name, dep in _named(docs, "Deployment").items():
        pod = (dep.get("spec") or {}).get("template") or {}
        command = " ".join(str(c) for c in ((pod.get("spec") or {}).get("containers") or [{}])[0].get("command") or [])
        found = SERVICE_COMMAND.search(command)
        if found is None:
            continue  # not a Threadline service (the fake model server)
        services += 1
        problems += _deployment_problems(name, dep, env)
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if not any(((p.get("spec") or {}).get("selector") or {}).get("matchLabels", {}).items() <= labels.items()
                   and ((p.get("spec") or {}).get("selector") or {}).get("matchLabels") for p in pdbs):
            problems.append(f"Deployment {name}: no PodDisruptionBudget selects its pods")
        if name not in scaled:
            problems.append(f"Deployment {name}: no ScaledObject scales it (KEDA, on its consumer group's lag)")
            continue
        so_name, so = scaled.pop(name)
        if "replicas" in (dep.get("spec") or {}):
            problems.append(f"Deployment {name}: sets replicas, which every kubectl apply would reset under KEDA")
        if found.group(1) in HTTP_SERVICES:
            problems += _http_scaled_object_problems(so_name, so)
        else:
            problems += _scaled_object_problems(so_name, so, found.group(1), env)
    for target, (so_name, _) in scaled.items():
        problems.append(f"ScaledObject {so_name}: scaleTargetRef {target!r} is no Threadline service Deployment")
    if services == 0:
        problems.append("no Deployment runs a Threadline service (python -m threadline.services.<name>)")
    return problems


# ---------------------------------------------------------------- compose


def _seconds(value: Any) -> float:
    """Compose durations: ``20s``, ``1m30s``, ``1500ms`` (a bare number is seconds)."""
    if isinstance(value, int | float):
        return float(value)
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"([0-9.]+)(ms|us|h|m|s)", str(value))
    return sum(float(n) * units[u] for n, u in parts)


def check_compose(path: Path) -> list[str]:
    """``path`` against the compose-spec schema, then the project's rules for its services."""
    try:
        compose = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        return [f"{path}: cannot be read: {exc}"]
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)(schema)
    problems = [f"{path} (compose-spec schema): {_where(e)}: {e.message}"
                for e in sorted(validator.iter_errors(compose), key=lambda e: list(e.absolute_path))]
    if problems:
        return problems
    services = compose.get("services") or {}
    count = 0
    for name, svc in services.items():
        command = " ".join(str(c) for c in svc.get("command") or []) if isinstance(svc.get("command"), list) \
            else str(svc.get("command") or "")
        if SERVICE_COMMAND.search(command) is None:
            continue
        count += 1
        env = svc.get("environment") or {}
        port = str(env.get("THREADLINE_METRICS_PORT", "")) if isinstance(env, dict) else ""
        if not port:
            problems.append(f"{path} service {name}: THREADLINE_METRICS_PORT is not set")
        test = " ".join(str(t) for t in (svc.get("healthcheck") or {}).get("test") or [])
        if "/readyz" not in test or (port and f":{port}/" not in test):
            problems.append(f"{path} service {name}: healthcheck must ask /readyz on THREADLINE_METRICS_PORT, is {test!r}")
        if _seconds(svc.get("stop_grace_period", "10s")) < MIN_GRACE_S:
            problems.append(f"{path} service {name}: stop_grace_period must be >= {MIN_GRACE_S}s (decision 44), "
                            f"is {svc.get('stop_grace_period', '10s (the default)')}")
    if count == 0:
        problems.append(f"{path}: no service runs a Threadline service (python -m threadline.services.<name>)")
    return problems


# ---------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> int:
    """Validate; print the problems (or a summary). Returns the exit status: 0 ok, 1 problems."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k8s", type=Path, default=ROOT / "deploy" / "k8s")
    parser.add_argument("--compose", type=Path, default=ROOT / "compose.yaml")
    parser.add_argument("--kubernetes-version", action="append", dest="versions",
                        help=f"repeatable; default {OLDEST_KUBERNETES} and the newest kubernetes-validate knows")
    args = parser.parse_args(argv)
    versions = args.versions or [OLDEST_KUBERNETES, kubernetes_validate.latest_version()]
    docs, problems, how = load_k8s(args.k8s)
    problems += check_schemas(docs, versions)
    problems += check_rules([d for _, d in docs])
    problems += check_compose(args.compose)
    for line in problems:
        print(f"FAIL {line}")
    if problems:
        print(f"validate-deploy: {len(problems)} problem(s)")
        return 1
    print(f"validate-deploy: ok: {len(docs)} Kubernetes documents ({how}) against Kubernetes "
          f"{', '.join(versions)} and the KEDA ScaledObject schema; {args.compose.name} against the compose-spec schema")
    return 0


if __name__ == "__main__":
    sys.exit(main())

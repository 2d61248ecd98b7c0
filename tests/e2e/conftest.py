"""End-to-end fixtures: the fake model server (in a thread) and the four services (real
processes, in their own consumer groups under this session's topic prefix)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from threadline.config import Settings
from threadline.testing.harness import stop_process
from threadline.testing.model_script import ModelScript
from threadline.testing.model_server import RunningServer, start_in_thread

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("ingress", "run_orchestrator", "processor_worker", "notification_scheduler")


@pytest.fixture(scope="session")
def model_server() -> Iterator[RunningServer]:
    server = start_in_thread()
    yield server
    server.stop()


@pytest.fixture
def model(model_server: RunningServer) -> ModelScript:
    script = ModelScript(model_server.url)
    script.reset()
    return script


@dataclass
class ServiceSet:
    env: dict[str, str]
    log_dir: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, instance: str, **extra_env: str) -> None:
        env = {**self.env, "THREADLINE_INSTANCE_ID": instance, **extra_env}
        path = self.log_dir / f"{instance}.log"
        if path.exists():  # each start gets a fresh log, so waits never match an earlier process
            n = len(list(self.log_dir.glob(f"{instance}.*.log"))) + 1
            path.rename(self.log_dir / f"{instance}.{n}.log")
        log = open(path, "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([sys.executable, "-m", f"threadline.services.{name}"], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
        self.procs[instance] = proc
        deadline = time.monotonic() + 60
        while b"service started" not in (self.log_dir / f"{instance}.log").read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{instance} did not start:\n" + (self.log_dir / f"{instance}.log").read_text()[-3000:])
            time.sleep(0.1)

    def kill(self, instance: str) -> None:
        """``kill -9``: no drain, no commit, no goodbye."""
        proc = self.procs.pop(instance)
        proc.kill()
        proc.wait()

    def stop(self, instance: str, sig: int = signal.SIGTERM) -> None:
        stop_process(self.procs.pop(instance), sig, 20)

    def alive(self) -> dict[str, bool]:
        return {k: p.poll() is None for k, p in self.procs.items()}


@pytest.fixture(scope="session")
def services(cluster, model_server, tmp_path_factory) -> Iterator[ServiceSet]:
    log_dir = tmp_path_factory.mktemp("service-logs")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "THREADLINE_KAFKA_BOOTSTRAP": cluster.bootstrap,
           "THREADLINE_PG_DSN": cluster.dsn, "THREADLINE_TOPIC_PREFIX": cluster.prefix,
           "THREADLINE_AGENTS_MODULE": "tests.e2e.agents", "THREADLINE_MODEL_API_BASE": model_server.api_base,
           "THREADLINE_PARTITIONS": "4", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    svc = ServiceSet(env=env, log_dir=log_dir)
    try:
        for name in SERVICES:
            svc.start(name, f"{name}-1")
        yield svc
    finally:
        for instance in list(svc.procs):
            svc.stop(instance)


@pytest.fixture(scope="session")
def settings(cluster) -> Settings:
    return Settings(kafka_bootstrap=cluster.bootstrap, pg_dsn=cluster.dsn, topic_prefix=cluster.prefix,
                    partitions=4)

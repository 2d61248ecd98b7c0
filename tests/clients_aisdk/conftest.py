"""Fixtures of the AI SDK suite: the services and the gateway of tests/clients (with the chat
route's reasoning on), and this Node project's ``node_modules`` (``npm ci`` when missing)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import paired_history  # noqa: F401 - the suite-wide pairing check, on this folder too
from tests.e2e.gateway_http import GatewayInfo
from threadline.testing.containers import free_port
from threadline.testing.harness import ServiceSet
from threadline.testing.model_server import RunningServer, start_in_thread

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture(scope="module")
def model_server() -> Iterator[RunningServer]:
    server = start_in_thread()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(own_cluster: Any, model_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayInfo]:
    """The four services (agents of ``tests.e2e.agents``) and the gateway, whose chat route
    sends reasoning (``chatRoute``'s ``sendReasoning``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "THREADLINE_KAFKA_BOOTSTRAP": own_cluster.bootstrap,
           "THREADLINE_PG_DSN": own_cluster.dsn, "THREADLINE_TOPIC_PREFIX": own_cluster.prefix,
           "THREADLINE_AGENTS_MODULE": "tests.e2e.agents", "THREADLINE_MODEL_API_BASE": model_server.api_base,
           "THREADLINE_PARTITIONS": "4", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "THREADLINE_MODEL_RETRY_INITIAL_S": "0.05", "THREADLINE_MODEL_RETRY_MAX_WAIT_S": "5"}
    info = GatewayInfo.make(free_port())
    svc = ServiceSet(env=env, log_dir=tmp_path_factory.mktemp("aisdk-logs"), cwd=ROOT)
    try:
        svc.start_all()
        svc.start("gateway", "gateway-1", **info.env(), THREADLINE_GATEWAY_CHAT_SEND_REASONING="true")
        yield info
    finally:
        svc.stop_all()


@pytest.fixture(scope="module")
def node_project() -> Path:
    """tests/clients_aisdk with ``ai`` installed (``npm ci`` once when it is not)."""
    if not (HERE / "node_modules" / "ai" / "package.json").exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("the AI SDK suite needs Node 20+ and npm (to install ai)", pytrace=False)
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, check=True, timeout=600)
    return HERE

"""Fixtures of the AI SDK suite: the services and the gateway of tests/clients (with the chat
route's reasoning on), and this Node project's ``node_modules`` (``npm ci`` when missing)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients.conftest import model_server  # noqa: F401 - the client suite's fake model server, per module
from tests.clients.suite_services import running_services, services_env
from tests.e2e.conftest import paired_history  # noqa: F401 - the suite-wide pairing check, on this folder too
from tests.e2e.gateway_http import GatewayInfo
from threadline.testing.containers import free_port
from threadline.testing.model_server import RunningServer

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def gateway(own_cluster: Any, model_server: RunningServer,  # noqa: F811 - the imported fixture
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayInfo]:
    """The four services (agents of ``tests.e2e.agents``) and the gateway, whose chat route
    sends reasoning (``chatRoute``'s ``sendReasoning``)."""
    info = GatewayInfo.make(free_port())
    with running_services(services_env(own_cluster, model_server, "tests.e2e.agents"),
                          tmp_path_factory.mktemp("aisdk-logs"), **info.env(),
                          THREADLINE_GATEWAY_CHAT_SEND_REASONING="true"):
        yield info


@pytest.fixture(scope="module")
def node_project() -> Path:
    """tests/clients_aisdk with ``ai`` installed (``npm ci`` once when it is not)."""
    if not (HERE / "node_modules" / "ai" / "package.json").exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("the AI SDK suite needs Node 20+ and npm (to install ai)", pytrace=False)
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, check=True, timeout=600)
    return HERE

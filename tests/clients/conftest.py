"""Fixtures of the client suites: a fake model server, the services serving ``tests.e2e.agents``
and the gateway with two tenants' keys — started for the module and stopped after it, on a
database and topic prefix of the module's own (``own_cluster``), so that no other folder's
services in the same pytest process take their runs — and the
Node project's ``node_modules`` (``npm ci`` from the lockfile when missing)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients.suite_services import running_services, services_env
from tests.e2e.conftest import paired_history  # noqa: F401 - the suite-wide pairing check, on this folder too
from tests.e2e.gateway_http import GatewayInfo
from threadline.testing.containers import free_port
from threadline.testing.model_server import RunningServer, start_in_thread

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def model_server() -> Iterator[RunningServer]:
    server = start_in_thread()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(own_cluster: Any, model_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayInfo]:
    """The four services and the gateway (``tests/e2e/gateway_http.py``'s keys and tenants)."""
    info = GatewayInfo.make(free_port())
    with running_services(services_env(own_cluster, model_server, "tests.e2e.agents"),
                          tmp_path_factory.mktemp("clients-logs"), **info.env()):
        yield info


@pytest.fixture(scope="module")
def node_project() -> Path:
    """tests/clients with @mastra/client-js installed (``npm ci`` once when it is not)."""
    if not (HERE / "node_modules" / "@mastra" / "client-js" / "package.json").exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("the client suite needs Node 20+ and npm (to install @mastra/client-js)", pytrace=False)
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, check=True, timeout=600)
    return HERE

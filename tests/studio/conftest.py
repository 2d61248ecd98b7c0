"""Fixtures of the Mastra Studio test: a fake model server, the services serving the demo's agents
(``threadline.examples.support``) and an open gateway (no keys: local development, as ``make up``
runs it) that lets Studio's origin call it (CORS), and ``mastra studio`` (the ``mastra`` CLI pinned
in this folder's lockfile; ``npm ci`` once when it is missing) pointed at that gateway. Each is
started for the module and stopped after it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.clients.conftest import model_server  # noqa: F401 - the client suite's fake model server, per module
from tests.clients.suite_services import running_services, services_env
from tests.e2e.conftest import paired_history  # noqa: F401 - the suite-wide pairing check, on this folder too
from threadline.testing.containers import free_port
from threadline.testing.harness import stop_process
from threadline.testing.model_server import RunningServer

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def studio_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def gateway_url(own_cluster: Any, model_server: RunningServer, studio_port: int,  # noqa: F811 - the imported fixture
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The four services and an open gateway; Studio's origin may call it (CORS)."""
    port = free_port()
    env = services_env(own_cluster, model_server, "threadline.examples.support", fast_retries=False)
    for name in ("THREADLINE_GATEWAY_API_KEYS", "THREADLINE_GATEWAY_JWT_SECRET"):
        env.pop(name, None)
    origins = orjson.dumps([f"http://127.0.0.1:{studio_port}", f"http://localhost:{studio_port}"]).decode()
    with running_services(env, tmp_path_factory.mktemp("studio-logs"), THREADLINE_GATEWAY_PORT=str(port),
                          THREADLINE_GATEWAY_HOST="127.0.0.1", THREADLINE_GATEWAY_OPEN="true",
                          THREADLINE_GATEWAY_CORS_ORIGINS=origins):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def studio_url(gateway_url: str, studio_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``mastra studio`` on ``studio_port``, pointed at the gateway (``/api``)."""
    if not (HERE / "node_modules" / "mastra" / "package.json").exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("Mastra Studio needs Node 20+ and npm (to install the mastra CLI)", pytrace=False)
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, check=True, timeout=600)
    gateway_port = gateway_url.rsplit(":", 1)[1]
    log = tmp_path_factory.mktemp("studio-cli") / "mastra-studio.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(["node", str(HERE / "node_modules" / "mastra" / "dist" / "index.js"), "studio",
                                 "--port", str(studio_port), "--server-host", "127.0.0.1", "--server-port",
                                 gateway_port, "--server-api-prefix", "/api"], cwd=HERE, stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, "MASTRA_TELEMETRY_DISABLED": "1"})
    url = f"http://127.0.0.1:{studio_port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mastra studio did not start:\n{log.read_text()[-3000:]}", pytrace=False)
            time.sleep(0.3)
        yield url
    finally:
        stop_process(proc)

"""@mastra/client-js 1.47.0, unchanged, against the gateway's Mastra API (``/api``, decision 132):
each scenario of ``suite.mjs`` runs in Node with the client's own calls — ``listAgents``,
``getAgent(id).details()``, ``generate``, ``stream`` + ``processDataStream``, ``sendMessage`` /
``queueMessage`` / ``sendSignal`` / ``subscribeToThread`` / ``abortThread``, the memory
threads and messages (``uiMessages``, ``thread.delete()``), and the tools (``listTools``,
``getTool(id).execute``, ``agent.executeTool``), tool approval (``approveToolCall``,
``declineToolCall``, ``approveToolCallGenerate``) — and fails on the first result that is not what Mastra's client expects."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.gateway_http import TENANT_A
from threadline.testing.model_script import ModelScript

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("scenario", ["agents", "generate", "stream", "signals", "memory", "tools", "approval"])
def test_client_js(scenario: str, node_project: Path, gateway: Any, model_server: Any) -> None:
    node = shutil.which("node")
    assert node, "the client suite needs Node 20+"
    ModelScript(model_server.url).reset()  # the scenario scripts the model itself (POST /_fake/script)
    env = {**os.environ, "GATEWAY_URL": gateway.url, "KEY_A": gateway.key_a, "KEY_B": gateway.key_b,
           "RESOURCE": TENANT_A, "MODEL_URL": model_server.url}
    done = subprocess.run([node, "suite.mjs", scenario], cwd=node_project, env=env, capture_output=True, text=True,
                          timeout=150)
    assert done.returncode == 0, f"suite.mjs {scenario} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    assert f"ok {scenario}" in done.stdout

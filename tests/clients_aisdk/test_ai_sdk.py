"""The Vercel AI SDK's own reader (``ai`` 7.0.185, unchanged) against the gateway's chat route,
which answers as ``@mastra/ai-sdk``'s ``chatRoute`` does (decision 136): each scenario of
``suite.mjs`` sends with ``DefaultChatTransport`` and assembles the answer with
``readUIMessageStream`` — text and reasoning; a tool call, its result and data parts; an error;
a stream resumed with ``reconnectToStream`` — and fails on the first part that is not what the
AI SDK expects."""

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


@pytest.mark.parametrize("scenario", ["text", "tools", "error", "resume"])
def test_ai_sdk(scenario: str, node_project: Path, gateway: Any, model_server: Any) -> None:
    node = shutil.which("node")
    assert node, "the AI SDK suite needs Node 20+"
    ModelScript(model_server.url).reset()  # the scenario scripts the model itself (POST /_fake/script)
    env = {**os.environ, "GATEWAY_URL": gateway.url, "KEY_A": gateway.key_a, "RESOURCE": TENANT_A,
           "MODEL_URL": model_server.url}
    done = subprocess.run([node, "suite.mjs", scenario], cwd=node_project, env=env, capture_output=True, text=True,
                          timeout=150)
    assert done.returncode == 0, f"suite.mjs {scenario} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    assert f"ok {scenario}" in done.stdout

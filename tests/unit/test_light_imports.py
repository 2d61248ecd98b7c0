"""The services that never call a model start without importing litellm (several seconds of CPU
per process start: every restart in the crash and chaos tests pays it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("service", ["ingress", "run_orchestrator", "notification_scheduler"])
def test_a_service_without_model_calls_does_not_import_litellm(service: str) -> None:
    code = (f"import sys, threadline.services.{service}.service, tests.e2e.agents; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('litellm', 'openai')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout[:300]


def test_the_worker_does_import_litellm() -> None:
    """The check above can fail: the worker's import does load it."""
    code = "import sys, threadline.services.processor_worker.service; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr[-500:]

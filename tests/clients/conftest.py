"""Fixtures of the client suites: the end-to-end ones (the fake model server, the services
serving ``tests.e2e.agents``, the gateway with two tenants' keys), and the Node project's
``node_modules`` (``npm ci`` from the lockfile when missing)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import gateway, model, model_server, paired_history, services  # noqa: F401 - fixtures

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def node_project() -> Path:
    """tests/clients with @mastra/client-js installed (``npm ci`` once when it is not)."""
    if not (HERE / "node_modules" / "@mastra" / "client-js" / "package.json").exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("the client suite needs Node 20+ and npm (to install @mastra/client-js)", pytrace=False)
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, check=True, timeout=600)
    return HERE

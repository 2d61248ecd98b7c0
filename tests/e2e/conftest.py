"""End-to-end fixtures: the fake model server (in a thread) and the four services (real
processes, in their own consumer groups under this session's topic prefix), as a
:class:`threadline.testing.harness.ServiceSet`; ``SERVICES`` names them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from threadline.config import Settings
from threadline.testing.harness import ServiceSet
from threadline.testing.model_script import ModelScript
from threadline.testing.model_server import RunningServer, start_in_thread

if TYPE_CHECKING:
    from tests.e2e.gateway_http import GatewayInfo

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.fixture(autouse=True)
def paired_history(request: pytest.FixtureRequest, model_server: RunningServer) -> Iterator[None]:
    """Suite-wide: no model request of the test may break tool-call pairing (the fake server refuses
    it with HTTP 400 and counts it; ``threadline.testing.pairing``). A test that sends an unpaired
    history on purpose opts out with ``@pytest.mark.unpaired_history``."""
    fake = ModelScript(model_server.url)
    fake.pairing(clear=True)
    yield
    seen = fake.pairing(clear=True)
    if seen["count"] and request.node.get_closest_marker("unpaired_history") is None:
        reasons = "\n".join(v["reason"] for v in seen["violations"])
        pytest.fail(f"{seen['count']} model request(s) broke tool-call pairing:\n{reasons}", pytrace=False)


@pytest.fixture(scope="session")
def services(cluster, model_server, tmp_path_factory) -> Iterator[ServiceSet]:
    log_dir = tmp_path_factory.mktemp("service-logs")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "THREADLINE_KAFKA_BOOTSTRAP": cluster.bootstrap,
           "THREADLINE_PG_DSN": cluster.dsn, "THREADLINE_TOPIC_PREFIX": cluster.prefix,
           "THREADLINE_AGENTS_MODULE": "tests.e2e.agents", "THREADLINE_MODEL_API_BASE": model_server.api_base,
           "THREADLINE_PARTITIONS": "4", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "THREADLINE_MODEL_RETRY_INITIAL_S": "0.05", "THREADLINE_MODEL_RETRY_MAX_WAIT_S": "5",
           # the limited agent's model: 5 requests/s over all workers, evenly spaced
           "THREADLINE_MODEL_LIMITS": '{"openai/threadline-limited": {"rpm": 300}}',
           "THREADLINE_MODEL_LIMIT_BURST_S": "0",
           # the idle-topic sweep of tests/e2e/test_topic_retention.py (2 s idle) must never find a
           # topic some service still trusts: they take the registry row again after 0.5 s
           "THREADLINE_CHUNK_TOPIC_TRUST_S": "0.5"}
    for name in ("GOOGLE_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY", "GEMINI_API_KEY"):
        env.pop(name, None)  # the google-no-key agent shows the error of a missing key
    svc = ServiceSet(env=env, log_dir=log_dir, cwd=ROOT)
    try:
        svc.start_all()
        yield svc
    finally:
        svc.stop_all()


@pytest.fixture(scope="session")
def settings(cluster) -> Settings:
    return Settings(kafka_bootstrap=cluster.bootstrap, pg_dsn=cluster.dsn, topic_prefix=cluster.prefix,
                    partitions=4)


@pytest.fixture(scope="session")
def gateway(services) -> GatewayInfo:
    """The HTTP gateway (docs/gateway.md) as one more process of the session's :class:`ServiceSet`, on a
    free port, with two tenants' API keys and a JWT secret (``tests/e2e/gateway_http.py``)."""
    from tests.e2e.gateway_http import GatewayInfo
    from threadline.testing.containers import free_port

    info = GatewayInfo.make(free_port())
    services.start("gateway", "gateway-1", **info.env())
    return info


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module naming ``CHUNK_LAYOUTS`` (and using the ``chunk_layout`` fixture) runs its tests
    in each of those chunk layouts (docs/decisions.md#shared-chunk-layout)."""
    layouts = getattr(metafunc.module, "CHUNK_LAYOUTS", None)
    if layouts and "chunk_layout" in metafunc.fixturenames:
        metafunc.parametrize("chunk_layout", layouts, indirect=True, scope="module")


@pytest.fixture(scope="module")
def chunk_layout(request: pytest.FixtureRequest, services: ServiceSet, settings: Settings) -> Iterator[str]:
    """The module's tests run in the chunk layout of the parameter (``CHUNK_LAYOUTS``; default
    the session's: ``THREADLINE_CHUNK_LAYOUT``, so ``THREADLINE_CHUNK_LAYOUT=shared`` runs a whole
    session in the shared layout). Another layout than the session's restarts every running
    service and the gateway in it (:func:`tests.e2e.helpers.switch_chunk_layout`), and the
    session's layout comes back the same way afterwards."""
    from tests.e2e.helpers import switch_chunk_layout

    session = settings.chunk_layout
    layout = getattr(request, "param", session)
    switch_chunk_layout(services, settings, layout)
    try:
        yield layout
    finally:
        switch_chunk_layout(services, settings, session)

"""The services the three client suites (tests/clients, tests/clients_aisdk, tests/studio) run
against, in one place: the environment of the four services and the gateway on a module's own
cluster (``own_cluster``: database and topic prefix), and a context that starts them and stops
them after."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from threadline.testing.harness import ServiceSet
from threadline.testing.model_server import RunningServer

ROOT = Path(__file__).resolve().parents[2]


def services_env(cluster: Any, model_server: RunningServer, agents_module: str, *,
                 fast_retries: bool = True) -> dict[str, str]:
    """The services' environment: ``cluster``'s Kafka, PostgreSQL and topic prefix, the agents of
    ``agents_module``, the fake model server; with ``fast_retries`` a failed model call is
    retried after 0.05 s (at most 5 s) instead of the defaults."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "THREADLINE_KAFKA_BOOTSTRAP": cluster.bootstrap,
           "THREADLINE_PG_DSN": cluster.dsn, "THREADLINE_TOPIC_PREFIX": cluster.prefix,
           "THREADLINE_AGENTS_MODULE": agents_module, "THREADLINE_MODEL_API_BASE": model_server.api_base,
           "THREADLINE_PARTITIONS": "4", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    if fast_retries:
        env.update(THREADLINE_MODEL_RETRY_INITIAL_S="0.05", THREADLINE_MODEL_RETRY_MAX_WAIT_S="5")
    return env


@contextlib.contextmanager
def running_services(env: dict[str, str], log_dir: Path, **gateway_env: str) -> Iterator[None]:
    """The four services and one gateway (``gateway_env`` added to its environment) started
    with ``env``, their logs in ``log_dir``; all stopped on exit."""
    svc = ServiceSet(env=env, log_dir=log_dir, cwd=ROOT)
    try:
        svc.start_all()
        svc.start("gateway", "gateway-1", None, **gateway_env)
        yield
    finally:
        svc.stop_all()

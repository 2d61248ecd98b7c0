"""The gateway process: uvicorn serving :func:`threadline.gateway.app.make_app` on
``THREADLINE_GATEWAY_PORT`` (and ``/metrics``, ``/healthz``, ``/readyz`` on
``THREADLINE_METRICS_PORT`` when set, like every service). It logs ``service started`` once it
listens, connected to Kafka and PostgreSQL, and stops on SIGTERM within the bound of decision 44
(open streams are closed after a 5 s grace).

``/metrics`` adds ``threadline_gateway_open_streams`` (streams the fan-out reader serves now: each
counts against the limit until its response is over, decision 190) and
``threadline_gateway_max_streams`` (``THREADLINE_GATEWAY_MAX_STREAMS``)."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from prometheus_client import Gauge

from threadline._internal import gc_tuning
from threadline.client.client import ThreadlineClient
from threadline.client.kafka_transport import KafkaTransport
from threadline.config import Settings, get_settings
from threadline.gateway import ai_sdk, capacity, mastra_api
from threadline.gateway.app import Gateway, make_app
from threadline.gateway.auth import config_from_settings
from threadline.logging import configure, get_logger
from threadline.ops import tracing
from threadline.ops.metrics import REGISTRY
from threadline.store.db import Database

log = get_logger(__name__)

NAME = "gateway"


def build(settings: Settings) -> tuple[Any, Gateway]:
    """The ASGI app and its :class:`Gateway` for ``settings`` (connects in the app's lifespan).
    Raises :class:`threadline.gateway.auth.AuthConfigError` for unusable API keys."""
    auth = config_from_settings(settings)
    tracing.configure(NAME)  # before the client's own configure: the spans are the gateway's
    if not auth.configured:
        log.warning("no API key, JWT secret or THREADLINE_GATEWAY_OPEN: every request is refused (401)")
    db = Database(settings.pg_dsn, statement_cache=settings.pg_statement_cache,
                  transaction_pooling=settings.pg_transaction_pooling, max_size=settings.pg_pool_max,
                  acquire_timeout_s=settings.pg_pool_timeout_s)
    limit, open_now = capacity.descriptors()  # streams within the descriptors (decision 223)
    max_streams = capacity.stream_limit(settings.gateway_max_streams, descriptor_limit=limit, descriptors_open=open_now)
    if max_streams < settings.gateway_max_streams:
        log.info("stream limit lowered to fit the descriptor limit", max_streams=max_streams,
                    setting=settings.gateway_max_streams, descriptor_limit=limit, descriptors_open=open_now)
    # one fan-out reader for every stream the gateway serves: a constant number of Kafka consumers
    transport = KafkaTransport(settings, fanout=True, max_streams=max_streams)
    gateway = Gateway(ThreadlineClient(transport=transport), db, auth, chat_send_reasoning=settings.gateway_chat_send_reasoning)
    _stream_gauges(transport, max_streams)

    async def start() -> None:
        await db.start()
        await gateway.client.start()

    async def stop() -> None:
        await gateway.client.stop()
        await db.stop()

    async def kafka() -> bool:
        return gateway.client._started

    async def postgres() -> bool:
        return await db.ping()

    app = make_app(gateway, checks={"kafka": kafka, "postgres": postgres}, start=start, stop=stop,
                   extra_routes=[*mastra_api.ROUTES, *ai_sdk.ROUTES], cors_origins=settings.gateway_cors_origins)
    return app, gateway


async def serve(settings: Settings) -> None:
    """Serve until SIGTERM / SIGINT (uvicorn's handlers)."""
    app, gateway = build(settings)
    config = uvicorn.Config(app, host=settings.gateway_host, port=settings.gateway_port, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=5, lifespan="on")
    server = uvicorn.Server(config)
    ops = None
    if settings.metrics_port is not None:
        from threadline.ops.server import OpsServer

        ops = OpsServer(app.state.checks, port=settings.metrics_port)
        await ops.start()
    task = asyncio.create_task(server.serve(), name="gateway-http")
    while not server.started and not task.done():  # noqa: ASYNC110 - uvicorn sets a flag, it has no event
        await asyncio.sleep(0.05)
    if server.started:
        gc_tuning.freeze_start_up()
        log.info("service started", service=NAME, port=settings.gateway_port, auth=_auth_mode(gateway))
    await task
    if ops is not None:
        await ops.stop()
    log.info("service stopped", service=NAME)


def _stream_gauges(transport: KafkaTransport, max_streams: int) -> None:
    """Register the open-streams and stream-limit gauges (the first gateway built in a process)."""
    fanout = transport.fanout
    if fanout is None:
        return
    try:
        open_ = Gauge("threadline_gateway_open_streams", "SSE streams this gateway serves now (each holds a "
                      "fan-out stream until its response is over).", registry=REGISTRY)
    except ValueError:  # registered already: a second gateway built in one process (tests)
        return
    open_.set_function(lambda: fanout.open_streams)
    Gauge("threadline_gateway_max_streams", "THREADLINE_GATEWAY_MAX_STREAMS: streams at most; beyond, 503 at_capacity.",
          registry=REGISTRY).set(max_streams)


def _auth_mode(gateway: Gateway) -> str:
    a = gateway.auth
    modes = [m for m, on in (("api_keys", bool(a.keys)), ("jwt", a.verifies_jwts), ("open", a.open)) if on]
    return "+".join(modes) or "none"


def main() -> None:
    """The ``threadline-gateway`` entry point."""
    settings = get_settings()
    configure(level=settings.log_level, json=settings.log_json, service=NAME)
    gc_tuning.set_young_threshold(settings.gc_young_threshold)
    asyncio.run(serve(settings))

"""``/metrics`` (Prometheus), ``/healthz`` and ``/readyz`` of one service instance, served on
``THREADLINE_METRICS_PORT`` by uvicorn inside the service's event loop.

* ``/healthz``: 200 while the process serves requests (liveness).
* ``/readyz``: 200 when Kafka is joined (the consumer got its first assignment), PostgreSQL
  answers ``SELECT 1`` within 2 s and the migrations are applied; 503 otherwise. Both answer
  JSON ``{"ready": bool, "checks": {"kafka": bool, "postgres": bool, "migrations": bool}}``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from threadline.logging import get_logger
from threadline.ops.metrics import REGISTRY

log = get_logger(__name__)

Check = Callable[[], Awaitable[bool]]
"""``async () -> bool``: one readiness condition."""


async def readiness(checks: Mapping[str, Check]) -> Response:
    """The ``/readyz`` answer: JSON ``{"ready": bool, "checks": {name: bool}}``, 200 when every
    check holds, 503 otherwise; a check that raises or takes over 2 s counts as not ready."""
    results: dict[str, bool] = {}
    for name, check in checks.items():
        try:
            results[name] = bool(await asyncio.wait_for(check(), 2.0))
        except Exception:  # noqa: BLE001 - any failure of a check means "not ready"
            results[name] = False
    ready = all(results.values())
    return JSONResponse({"ready": ready, "checks": results}, status_code=200 if ready else 503)


def make_app(checks: dict[str, Check]) -> Starlette:
    """The ASGI app: ``checks`` (name → condition) decide ``/readyz``; a check that raises or
    takes over 2 s counts as not ready."""

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(_: Request) -> Response:
        return await readiness(checks)

    return Starlette(routes=[Route("/metrics", metrics), Route("/healthz", healthz), Route("/readyz", readyz)])


class _Server(uvicorn.Server):
    def capture_signals(self) -> Any:  # the service, not uvicorn, handles SIGTERM
        return contextlib.nullcontext()


class OpsServer:
    """Serves :func:`make_app` on ``host:port`` until :meth:`stop`.

    A port that cannot be bound is logged as a warning and the service runs without the
    endpoints (it never fails to start for them).
    """

    def __init__(self, checks: dict[str, Check], *, port: int, host: str = "0.0.0.0") -> None:
        config = uvicorn.Config(make_app(checks), host=host, port=port, log_level="warning", lifespan="off",
                                access_log=False)
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None
        self.port = port

    async def start(self) -> None:
        self._task = asyncio.create_task(self._serve(), name="ops-server")
        for _ in range(100):  # until it listens (or gave up)
            if self._server.started or self._task.done():
                break
            await asyncio.sleep(0.02)

    async def _serve(self) -> None:
        try:
            await self._server.serve()
        except (OSError, SystemExit) as exc:  # uvicorn exits on a port it cannot bind
            log.warning("metrics and health endpoints not served", port=self.port, error=str(exc))

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._task, 2.0)

"""The plumbing of Mastra's server API on the gateway (decision 132), shared by
:mod:`threadline.gateway.mastra_api` (agents) and :mod:`threadline.gateway.mastra_memory`:
Mastra's error answers, the request body, and the caller's tenancy checks (the ``/v1`` API's:
403 for a resource the caller may not name, another resource's thread answers as a missing one).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import orjson
from starlette.requests import Request
from starlette.responses import Response

from threadline.client.client import BrokerUnavailableError, RequestFailed
from threadline.client.kafka_transport import StreamsFullError
from threadline.gateway import mastra_shapes as shapes
from threadline.gateway.idempotency import KeyRefused, honouring
from threadline.gateway.state import HIDDEN_CODES, ApiError, Gateway
from threadline.store import queries
from threadline.store.db import Database

Handler = Callable[[Request], Awaitable[Response]]


def json_response(data: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data, default=str), status_code=status, media_type="application/json",
                    headers=headers)


def mastra_errors(handler: Handler) -> Handler:
    """Answer errors as Mastra's server does (``{error}``, and ``code``): 400 for a request
    Threadline cannot serve as asked, the ``/v1`` API's statuses otherwise (401, 403, 404, 422,
    503 when Kafka cannot be reached, 504). At capacity (too many open streams) the answer is the
    ``/v1`` API's: 503 ``at_capacity`` with ``Retry-After`` (decision 191)."""

    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except shapes.ShapeError as exc:
            return json_response(shapes.error_body(str(exc), "bad_request"), 400)
        except KeyRefused as exc:  # an Idempotency-Key of another request (409) or malformed (422)
            return json_response(shapes.error_body(str(exc), exc.code), exc.status)
        except ApiError as exc:
            inner = exc.body.get("error")
            code, message = (inner.get("code"), inner.get("message")) if isinstance(inner, dict) else ("error", str(exc))
            return json_response(shapes.error_body(str(message or exc), str(code)), exc.status)
        except RequestFailed as exc:
            if exc.code in HIDDEN_CODES:
                return json_response(shapes.error_body("Thread not found", "not_found"), 404)
            return json_response(shapes.error_body(exc.reply.message, exc.code), 422)
        except StreamsFullError as exc:  # before BrokerUnavailableError, which it is
            return json_response(shapes.error_body(str(exc), "at_capacity"), 503,
                                 {"Retry-After": str(exc.retry_after_s)})
        except BrokerUnavailableError:
            return json_response(shapes.error_body("Kafka cannot be reached", "broker_unavailable"), 503)
        except TimeoutError:
            return json_response(shapes.error_body("no reply from ingress in time", "timeout"), 504)

    wrapped.__name__ = handler.__name__
    return wrapped


def gw(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway  # set by make_app
    return gateway


async def body_of(request: Request) -> dict[str, Any]:
    """The JSON object of the request (``{}`` when empty). Raises :class:`ShapeError` otherwise."""
    try:
        data = orjson.loads(await request.body() or b"{}")
    except orjson.JSONDecodeError:
        raise shapes.ShapeError("the body is not JSON") from None
    if not isinstance(data, dict):
        raise shapes.ShapeError("the body must be a JSON object")
    return data


async def _key_scope(request: Request) -> tuple[Database, str]:
    """The resource an ``/api`` write names (``memory.resource``, ``resourceId``, or its ``runId``'s),
    which the caller must be allowed to act for: its ``Idempotency-Key``'s scope."""
    body = await body_of(request)
    memory = body.get("memory")
    resource = (memory.get("resource") if isinstance(memory, dict) else None) or body.get("resourceId")
    if not resource and body.get("runId"):
        found = await queries.run_thread(gw(request).db, str(body["runId"]))
        resource = found[0] if found else None
    if not isinstance(resource, str) or not resource:
        raise shapes.ShapeError("resourceId (or memory.resource, or runId) is required")
    allowed(request, resource)
    return gw(request).db, resource


def idempotent(handler: Handler) -> Handler:
    """An ``/api`` write that honours an ``Idempotency-Key`` as ``/v1``'s do (decision 213)."""
    return honouring(handler, _key_scope)


def allowed(request: Request, resource_id: str) -> None:
    """Raise 403 unless the caller may act for ``resource_id`` (401 without valid credentials)."""
    if not gw(request).caller(request).may_act_for(resource_id):
        raise ApiError(403, "forbidden", "this caller may not act for this resource")


async def writable(request: Request, resource_id: str, thread_id: str) -> None:
    """403 for a resource the caller may not name; 404 for another resource's thread."""
    allowed(request, resource_id)
    if await queries.thread_owner(gw(request).db, thread_id) not in (None, resource_id):
        raise ApiError(404, "not_found", "Thread not found")


_T = TypeVar("_T")


async def paced(items: AsyncIterator[_T], quiet_s: float) -> AsyncGenerator[_T | None]:
    """``items`` as they come, and ``None`` after each ``quiet_s`` s in which none came (time for
    an SSE keep-alive comment). Closing it (``contextlib.aclosing``) cancels the pending read."""
    it = items.__aiter__()
    pending: asyncio.Future[_T] | None = None
    try:
        while True:
            pending = pending or asyncio.ensure_future(it.__anext__())
            finished, _ = await asyncio.wait({pending}, timeout=quiet_s)
            if not finished:
                yield None
                continue
            pending = None
            try:
                item = finished.pop().result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()

"""Mastra's server API on the gateway, under ``/api`` (decision 132): the routes
``@mastra/client-js`` calls for agents (list, details, generate, stream, send-message,
queue-message, signals, threads/subscribe, threads/abort); the tool routes are in
:mod:`threadline.gateway.mastra_tools`, the memory routes in :mod:`threadline.gateway.mastra_memory`.
Authentication and tenancy are the ``/v1`` API's: the key or token decides which resources a
caller may name; another resource's thread answers as a missing one.

``stream`` and ``threads/subscribe`` answer with the stream itself (``text/event-stream``):
``data: <chunk JSON>`` lines, an SSE comment every :data:`KEEP_ALIVE_S` seconds while nothing
comes, and ``data: [DONE]`` after the run's ``finish`` (``stream`` only; a subscription lasts
until the caller leaves). Errors are Mastra's ``{error: <message>}`` with Threadline's ``code``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from threadline.events.options import split_caller_options
from threadline.gateway import mastra_approvals as approvals
from threadline.gateway import mastra_memory as memory
from threadline.gateway import mastra_shapes as shapes
from threadline.gateway import mastra_studio as studio
from threadline.gateway import mastra_tools as tools
from threadline.gateway.mastra_http import body_of, gw, idempotent, mastra_errors, paced, writable
from threadline.gateway.mastra_http import json_response as _json
from threadline.gateway.state import ApiError, Gateway
from threadline.gateway.streaming import ClosingStreamingResponse, bounded
from threadline.logging import get_logger
from threadline.store import queries

log = get_logger(__name__)

KEEP_ALIVE_S = 15.0
"""Seconds of silence on a stream before a keep-alive comment is sent."""


async def _agent_known(request: Request) -> str:
    gw(request).caller(request)
    agent_id = request.path_params["agent_id"]
    if await queries.read_agent(gw(request).db, agent_id) is None:
        raise ApiError(404, "not_found", "Agent not found")
    return agent_id


# --- agents: details ----------------------------------------------------------------------------
async def code_facts(gateway: Gateway) -> dict[str, shapes.CodeFacts]:
    """Each agent's :class:`CodeFacts` from the agents module the gateway is configured with
    (``THREADLINE_AGENTS_MODULE``, imported once per process by :func:`mastra_tools.code_agents`);
    ``{}`` when none is configured or it cannot be imported (then tool schemas and the model are
    left out of the details)."""
    agents = await tools.code_agents(gateway) or {}
    return {agent_id: shapes.CodeFacts({t.id: t.parameters() for t in agent.tools.values()},
                                       agent.model if isinstance(agent.model, str) else None)
            for agent_id, agent in agents.items()}


async def _details(gateway: Gateway, agent_id: str, facts: dict[str, shapes.CodeFacts]) -> dict[str, Any] | None:
    from threadline.gateway import editing

    row = await queries.read_agent(gateway.db, agent_id)
    if row is None:
        return None
    return shapes.agent_shape(row, await editing.view(gateway.db, agent_id), facts.get(agent_id))


@mastra_errors
async def list_agents(request: Request) -> Response:
    gateway = gw(request)
    gateway.caller(request)
    facts = await code_facts(gateway)
    out = {}
    for a in await queries.list_agents(gateway.db):
        found = await _details(gateway, a["id"], facts)
        if found is not None:
            out[a["id"]] = found
    return _json(out)


@mastra_errors
async def get_agent(request: Request) -> Response:
    gateway = gw(request)
    gateway.caller(request)
    found = await _details(gateway, request.path_params["agent_id"], await code_facts(gateway))
    if found is None:
        raise ApiError(404, "not_found", "Agent not found")
    return _json(found)


# --- agents: runs -------------------------------------------------------------------------------
async def _chunks(output: Any, *, done: bool) -> AsyncIterator[bytes]:
    """The SSE bytes of ``output`` (a chunk source with ``stream``), a keep-alive comment after
    :data:`KEEP_ALIVE_S` s of silence, and ``[DONE]`` at the end when ``done``."""
    try:
        async with contextlib.aclosing(paced(output.stream, KEEP_ALIVE_S)) as chunks:
            async for chunk in chunks:
                yield shapes.KEEP_ALIVE if chunk is None else shapes.sse_data(chunk)
        if done:
            yield shapes.DONE
    finally:
        await _close(output)


async def _close(output: Any) -> None:
    close = getattr(output, "unsubscribe", None)
    if close is not None:
        await close()


def _sse(output: Any, *, done: bool, expires_at: float | None) -> StreamingResponse:
    """``output``'s chunks as SSE until ``expires_at``, the caller's credential's expiry (then an
    ``error`` chunk ``token_expired`` ends it, decision 216); its subscription is closed when the
    response is over, also when the caller left before the body started (decision 190)."""
    body = bounded(_chunks(output, done=done), expires_at, shapes.sse_data(shapes.EXPIRED_CHUNK))
    return ClosingStreamingResponse(body, on_close=lambda: _close(output),
                                    media_type="text/event-stream",
                                    headers={"Cache-Control": "no-cache, no-store", "X-Accel-Buffering": "no"})


@mastra_errors
@idempotent
async def generate(request: Request) -> Response:
    agent_id = await _agent_known(request)
    body = await body_of(request)
    target = shapes.memory_target(body)
    await writable(request, target.resource_id, target.thread_id)
    result = await gw(request).client.generate(
        shapes.message_input(body.get("messages")), resource_id=target.resource_id, thread_id=target.thread_id,
        agent_id=agent_id, options=shapes.run_options(body), thread=target.thread)
    return _json(shapes.generate_shape(result.dump()))


@mastra_errors
async def stream(request: Request) -> Response:
    agent_id = await _agent_known(request)
    body = await body_of(request)
    target = shapes.memory_target(body)
    await writable(request, target.resource_id, target.thread_id)
    client = gw(request).client
    options = shapes.run_options(body)
    sent = await client.stream(shapes.message_input(body.get("messages")), resource_id=target.resource_id,
                               thread_id=target.thread_id, agent_id=agent_id, options=options, thread=target.thread)
    reply = await sent.accepted
    if not reply.run_id:
        raise ApiError(422, reply.action, f"the message was not run ({reply.action})")
    output = reply.output or client.run_output(reply.run_id, resource_id=target.resource_id,
                                               thread_id=target.thread_id, sent_at_ms=sent.sent_at_ms,
                                               hide_signals=split_caller_options(options)[1])
    log.info("mastra stream opened", thread_id=target.thread_id, run_id=reply.run_id)
    return _sse(output, done=True, expires_at=gw(request).caller(request).expires_at)


async def _signal_target(request: Request, body: dict[str, Any]) -> tuple[str, str]:
    """``(resource_id, thread_id)`` of a send-message/signal body: named, or the thread of ``runId``."""
    resource, thread = body.get("resourceId"), body.get("threadId")
    if (not resource or not thread) and body.get("runId"):
        found = await queries.run_thread(gw(request).db, str(body["runId"]))
        if found is None:
            raise ApiError(404, "not_found", "Run not found")
        resource, thread = resource or found[0], thread or found[1]
    if not isinstance(resource, str) or not resource or not isinstance(thread, str) or not thread:
        raise shapes.ShapeError("resourceId and threadId (or runId) are required")
    await writable(request, resource, thread)
    return resource, thread


@dataclass(frozen=True)
class _Verb:
    """What send-message, queue-message and signals act on: the agent, the body, the thread."""

    agent_id: str
    body: dict[str, Any]
    resource_id: str
    thread_id: str


async def _verb_target(request: Request) -> _Verb:
    """The known agent of the path, the JSON body and its writable thread (:func:`_signal_target`)."""
    agent_id = await _agent_known(request)
    body = await body_of(request)
    resource, thread = await _signal_target(request, body)
    return _Verb(agent_id, body, resource, thread)


async def _accepted(result: Any) -> Response:
    return _json(shapes.accepted_shape((await result.accepted).dump()))


@mastra_errors
@idempotent
async def send_message(request: Request) -> Response:
    v = await _verb_target(request)
    return await _accepted(await gw(request).client.send_message(
        shapes.message_input(v.body.get("message")), resource_id=v.resource_id, thread_id=v.thread_id,
        agent_id=v.agent_id, run_id=v.body.get("runId"), if_active=shapes.if_active(v.body.get("ifActive")),
        if_idle=shapes.if_idle(v.body.get("ifIdle"))))


@mastra_errors
@idempotent
async def queue_message(request: Request) -> Response:
    v = await _verb_target(request)
    return await _accepted(await gw(request).client.queue_message(
        shapes.message_input(v.body.get("message")), resource_id=v.resource_id, thread_id=v.thread_id,
        agent_id=v.agent_id, if_idle=shapes.if_idle(v.body.get("ifIdle"))))


@mastra_errors
@idempotent
async def send_signal(request: Request) -> Response:
    v = await _verb_target(request)
    signal = v.body.get("signal")
    if not isinstance(signal, dict):
        raise shapes.ShapeError("signal must be an object {type, contents, …}")
    return await _accepted(await gw(request).client.send_signal(
        signal, resource_id=v.resource_id, thread_id=v.thread_id, agent_id=v.agent_id, run_id=v.body.get("runId"),
        if_active=shapes.if_active(v.body.get("ifActive")), if_idle=shapes.if_idle(v.body.get("ifIdle"))))


async def _named_thread(request: Request, body: dict[str, Any]) -> tuple[str, str]:
    """``(resourceId, threadId)`` of the body, the thread writable by the caller; without
    ``resourceId`` (optional in Mastra's schema), the existing thread's own resource."""
    resource, thread = body.get("resourceId"), body.get("threadId")
    if not isinstance(thread, str) or not thread:
        raise shapes.ShapeError("threadId is required")
    if not resource:
        resource = await queries.thread_owner(gw(request).db, thread)
        if resource is None or not gw(request).caller(request).may_act_for(resource):
            raise ApiError(404, "not_found", "Thread not found")
    if not isinstance(resource, str):
        raise shapes.ShapeError("resourceId must be a string")
    await writable(request, resource, thread)
    return resource, thread


@mastra_errors
async def subscribe(request: Request) -> Response:
    """``subscribeToThread``: the thread's chunks from now on, until the caller leaves."""
    await _agent_known(request)
    body = await body_of(request)
    resource, thread = await _named_thread(request, body)
    sub = await gw(request).client.subscribe_to_thread(resource, thread)
    log.info("mastra subscription opened", thread_id=thread)
    return _sse(sub, done=False, expires_at=gw(request).caller(request).expires_at)


@mastra_errors
async def abort(request: Request) -> Response:
    agent_id = await _agent_known(request)
    body = await body_of(request)
    resource, thread = await _named_thread(request, body)
    aborted = await gw(request).client.abort(resource_id=resource, thread_id=thread, agent_id=agent_id,
                                             run_id=body.get("expectedRunId"))
    return _json({"aborted": aborted})


ROUTES = [
    *studio.ROUTES,
    Route("/api/agents", list_agents, methods=["GET"]),
    Route("/api/agents/{agent_id}", get_agent, methods=["GET"]),
    Route("/api/agents/{agent_id}/generate", generate, methods=["POST"]),
    Route("/api/agents/{agent_id}/stream", stream, methods=["POST"]),
    Route("/api/agents/{agent_id}/send-message", send_message, methods=["POST"]),
    Route("/api/agents/{agent_id}/queue-message", queue_message, methods=["POST"]),
    Route("/api/agents/{agent_id}/signals", send_signal, methods=["POST"]),
    Route("/api/agents/{agent_id}/threads/subscribe", subscribe, methods=["POST"]),
    Route("/api/agents/{agent_id}/threads/abort", abort, methods=["POST"]),
    *tools.ROUTES,
    *approvals.ROUTES,
    *memory.ROUTES,
]
"""Every ``/api`` route (registered by :func:`threadline.gateway.app.make_app`'s caller)."""

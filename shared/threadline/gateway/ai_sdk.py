"""The AI SDK's chat endpoint on the gateway, as ``@mastra/ai-sdk``'s ``chatRoute`` serves it
(decision 136): ``useChat`` with ``DefaultChatTransport({api: "<gateway>/chat/<agentId>"})``
talks to a Threadline agent unchanged.

``POST /chat/{agent_id}`` takes the transport's body ``{id, messages, trigger, messageId?, …}``
(plus Mastra's run options, e.g. ``memory: {thread, resource}``) and answers the UI message
stream (:mod:`threadline.gateway.ai_sdk_stream`). The thread is ``memory.thread`` (or
``threadId``), else the chat ``id``; the resource is ``memory.resource`` (or ``resourceId``),
else the caller's only resource. Only the last user message is sent: the thread's memory holds
the rest (Mastra's memory does the same with the history ``useChat`` repeats).

``GET /chat/{agent_id}/{chat_id}/stream`` is the transport's ``reconnectToStream`` (``resume:
true``): the thread's active run, replayed from its first chunk from the thread's chunk topic,
then followed live; 204 when no run is active. ``?resourceId=`` names the resource when the
caller has several.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from threadline.gateway import mastra_shapes as shapes
from threadline.gateway.ai_sdk_stream import HEADERS, UiOptions, error_text, sse, ui_chunks
from threadline.gateway.auth import ANY
from threadline.gateway.mastra_http import body_of, gw, mastra_errors, paced, writable
from threadline.gateway.state import ApiError
from threadline.gateway.streaming import bounded
from threadline.logging import get_logger
from threadline.store import queries

log = get_logger(__name__)

KEEP_ALIVE_S = 15.0
"""Silence after which an SSE comment keeps proxies from closing the stream."""
_TRANSPORT_KEYS = frozenset({"id", "messages", "trigger", "messageId", "metadata"})
"""Fields of ``DefaultChatTransport``'s body that are not run options."""


def _only_resource(request: Request) -> str:
    """The caller's one resource. Raises :class:`ShapeError` when it has several (or all)."""
    caller = gw(request).caller(request)
    named = [r for r in caller.resources if r != ANY]
    if len(named) != 1 or ANY in caller.resources:
        raise shapes.ShapeError("memory.resource (or resourceId) is required: this caller may act for "
                                "more than one resource")
    return named[0]


def _target(request: Request, body: Mapping[str, Any]) -> tuple[str, str]:
    """``(resource_id, thread_id)`` of a chat request (see the module's docstring)."""
    given = body.get("memory")
    memory: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    thread = memory.get("thread", body.get("threadId")) or body.get("id")
    thread_id = thread.get("id") if isinstance(thread, Mapping) else thread
    if not isinstance(thread_id, str) or not thread_id:
        raise shapes.ShapeError("the chat id (or memory.thread) is required")
    resource = memory.get("resource", body.get("resourceId")) or _only_resource(request)
    if not isinstance(resource, str):
        raise shapes.ShapeError("memory.resource must be a string")
    return resource, thread_id


def last_user_message(messages: object) -> Any:
    """The content of the last user ``UIMessage`` (``{id, role, parts}``): its text, or its
    text and file parts. Raises :class:`ShapeError` when there is none."""
    users = [m for m in messages if isinstance(m, Mapping) and m.get("role") == "user"] \
        if isinstance(messages, list) else []
    if not users:
        raise shapes.ShapeError("messages must be an array of UIMessage objects ending with a user message")
    parts = users[-1].get("parts")
    if not isinstance(parts, list):
        return shapes.message_input([users[-1]])  # {role, content}, as older clients send it
    kept = [p for p in parts if isinstance(p, Mapping) and p.get("type") in ("text", "file")]
    if all(p["type"] == "text" for p in kept):
        return "".join(str(p.get("text", "")) for p in kept)
    return kept


def _options(request: Request, body: Mapping[str, Any]) -> UiOptions:
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    answer_id = last.get("id") if isinstance(last, Mapping) and last.get("role") == "assistant" else None
    return UiOptions(send_reasoning=gw(request).chat_send_reasoning, message_id=answer_id)


async def _ui_stream(output: Any, options: UiOptions) -> AsyncIterator[bytes]:
    """The UI message stream of ``output``'s chunks, a keep-alive comment after
    :data:`KEEP_ALIVE_S` of silence, an ``error`` chunk if reading fails, then ``[DONE]``."""
    try:
        async with contextlib.aclosing(paced(output.stream, KEEP_ALIVE_S)) as chunks:
            async for chunk in chunks:
                if chunk is None:
                    yield shapes.KEEP_ALIVE
                    continue
                for part in ui_chunks(chunk, options):
                    yield sse(part)
    except Exception as exc:  # noqa: BLE001 - the reader gets the failure as the protocol's error chunk
        log.warning("chat stream failed", error=type(exc).__name__)
        yield sse({"type": "error", "errorText": error_text(str(exc) or type(exc).__name__)})
    finally:
        close = getattr(output, "unsubscribe", None)
        if close is not None:
            await close()
    yield shapes.DONE


def _response(request: Request, body: AsyncIterator[bytes]) -> StreamingResponse:
    """The UI stream ``body``, ended at the caller's credential's expiry by an ``error`` part
    (``token_expired``) and ``[DONE]`` (decision 216)."""
    expires_at = gw(request).caller(request).expires_at
    last = sse({"type": "error", "errorText": shapes.EXPIRED_MESSAGE}) + shapes.DONE
    return StreamingResponse(bounded(body, expires_at, last), media_type="text/event-stream", headers=HEADERS)


async def _agent(request: Request) -> str:
    gw(request).caller(request)
    agent_id = request.path_params["agent_id"]
    if await queries.read_agent(gw(request).db, agent_id) is None:
        raise ApiError(404, "not_found", f"Agent {agent_id} not found")
    return agent_id


@mastra_errors
async def chat(request: Request) -> Response:
    """``chatRoute``'s ``POST``: run the agent on the last user message, answer the UI stream."""
    agent_id = await _agent(request)
    body = await body_of(request)
    if body.get("trigger") == "regenerate-message":
        raise shapes.ShapeError("regenerate-message is not supported: the thread's memory already holds the answer")
    resource_id, thread_id = _target(request, body)
    await writable(request, resource_id, thread_id)
    message = last_user_message(body.get("messages"))
    options = shapes.run_options({k: v for k, v in body.items() if k not in _TRANSPORT_KEYS})
    client = gw(request).client
    sent = await client.stream(message, resource_id=resource_id, thread_id=thread_id, agent_id=agent_id,
                               options=options)
    reply = await sent.accepted
    if not reply.run_id:
        raise ApiError(422, reply.action, f"the message was not run ({reply.action})")
    output = reply.output or client.run_output(reply.run_id, resource_id=resource_id, thread_id=thread_id,
                                               sent_at_ms=sent.sent_at_ms)
    log.info("chat stream opened", thread_id=thread_id, run_id=reply.run_id)
    return _response(request, _ui_stream(output, _options(request, body)))


@mastra_errors
async def resume(request: Request) -> Response:
    """The transport's ``reconnectToStream``: the active run's UI stream from its start; 204 without one."""
    await _agent(request)
    thread_id = request.path_params["chat_id"]
    resource_id = request.query_params.get("resourceId") or _only_resource(request)
    await writable(request, resource_id, thread_id)
    gateway = gw(request)
    active = await queries.active_run_started(gateway.db, resource_id=resource_id, thread_id=thread_id)
    if active is None:
        return Response(status_code=204)
    output = gateway.client.run_output(active[0], resource_id=resource_id, thread_id=thread_id, sent_at_ms=active[1])
    log.info("chat stream resumed", thread_id=thread_id, run_id=active[0])
    return _response(request, _ui_stream(output, UiOptions(send_reasoning=gateway.chat_send_reasoning)))


ROUTES = [
    Route("/chat/{agent_id}", chat, methods=["POST"]),
    Route("/chat/{agent_id}/{chat_id}/stream", resume, methods=["GET"]),
]
"""``chatRoute``'s default path (``/chat/:agentId``) and its resumption."""

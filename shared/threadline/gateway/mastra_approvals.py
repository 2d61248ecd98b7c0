"""Mastra's tool-approval routes under ``/api`` (decision 227), as ``@mastra/client-js`` calls them:
``POST /api/agents/{agent_id}/approve-tool-call`` and ``decline-tool-call`` answer with the run's
stream from the answer on (``text/event-stream``, ``[DONE]`` after its ``finish``), as Mastra's
``approveToolCall`` / ``declineToolCall`` do; the ``-generate`` variants wait for the run's end and
answer with Mastra's ``generate`` shape. The body: ``{runId, toolCallId, reason?}`` (the thread is
the run's; ``memory {thread, resource}`` may name it). Tenancy as every write: a caller that may not
act for the run's resource is refused (403), a run nobody knows is 404; a call not held (never, or
answered already: approving twice runs the tool once) is 409.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from threadline.client.run_output import RunOutput
from threadline.gateway import mastra_shapes as shapes
from threadline.gateway.mastra_http import body_of, gw, mastra_errors, writable
from threadline.gateway.mastra_http import json_response as _json
from threadline.gateway.state import ApiError
from threadline.store import approvals, queries


async def _answered(request: Request, *, approved: bool) -> tuple[RunOutput, str, str, str]:
    """Send the answer of the body; the run's output from now on, and ``(run_id, resource, thread)``.

    Raises:
        ApiError: 404 no such run; 409 the call is not held (or was answered already).
        ShapeError: ``runId`` or ``toolCallId`` missing.
    """
    gw(request).caller(request)
    body: dict[str, Any] = await body_of(request)
    run_id, call_id = body.get("runId"), body.get("toolCallId")
    if not isinstance(run_id, str) or not run_id or not isinstance(call_id, str) or not call_id:
        raise shapes.ShapeError("runId and toolCallId are required")
    found = await approvals.run_position(gw(request).db, run_id)
    if found is None:
        raise ApiError(404, "not_found", "Run not found")
    resource, thread, streamed = found
    await writable(request, resource, thread)
    client = gw(request).client
    output = client.run_output(run_id, resource_id=resource, thread_id=thread, sent_at_ms=int(time.time() * 1000),
                               after_seq=streamed - 1)  # what the run streams from the answer on
    reason = body.get("reason") if isinstance(body.get("reason"), str) else None
    agent_id = request.path_params["agent_id"]
    if approved:
        answer = await client.approve_tool_call(resource_id=resource, thread_id=thread, run_id=run_id,
                                                tool_call_id=call_id, agent_id=agent_id)
    else:
        answer = await client.decline_tool_call(resource_id=resource, thread_id=thread, run_id=run_id,
                                                tool_call_id=call_id, agent_id=agent_id, reason=reason)
    if not answer.resolved:
        raise ApiError(409, "not_pending", f"tool call {call_id!r} is not waiting for approval ({answer.status})")
    return output, run_id, resource, thread


async def _streamed(request: Request, *, approved: bool) -> Response:
    from threadline.gateway.mastra_api import _sse  # the /api stream answer; imported here: that module serves ROUTES

    output, *_ = await _answered(request, approved=approved)
    return _sse(output, done=True, expires_at=gw(request).caller(request).expires_at)


async def _generated(request: Request, *, approved: bool) -> Response:
    output, run_id, resource, thread = await _answered(request, approved=approved)
    await output.consume_stream()
    runs = await queries.list_runs(gw(request).db, resource_id=resource, thread_id=thread)
    row: dict[str, Any] = next((dict(r) for r in runs if r["run_id"] == run_id), {})
    return _json(shapes.generate_shape({"text": row.get("text") or "", "usage": row.get("usage") or {},
                                        "finish_reason": row.get("finish_reason"), "run_id": run_id, "steps": [],
                                        "error": row.get("error"), "tripwire": row.get("tripwire")}))


@mastra_errors
async def approve_tool_call(request: Request) -> Response:
    return await _streamed(request, approved=True)


@mastra_errors
async def decline_tool_call(request: Request) -> Response:
    return await _streamed(request, approved=False)


@mastra_errors
async def approve_tool_call_generate(request: Request) -> Response:
    return await _generated(request, approved=True)


@mastra_errors
async def decline_tool_call_generate(request: Request) -> Response:
    return await _generated(request, approved=False)


ROUTES = [
    Route("/api/agents/{agent_id}/approve-tool-call", approve_tool_call, methods=["POST"]),
    Route("/api/agents/{agent_id}/decline-tool-call", decline_tool_call, methods=["POST"]),
    Route("/api/agents/{agent_id}/approve-tool-call-generate", approve_tool_call_generate, methods=["POST"]),
    Route("/api/agents/{agent_id}/decline-tool-call-generate", decline_tool_call_generate, methods=["POST"]),
]
"""The tool-approval routes, served with :data:`threadline.gateway.mastra_api.ROUTES`."""

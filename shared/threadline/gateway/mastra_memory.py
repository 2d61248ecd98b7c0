"""Mastra's memory routes on the gateway (``/api/memory/…``, decision 132): threads list, get,
create and update, a thread's messages by page, memory status and config; filtered by the
caller's resources as ``/v1`` is. A thread the caller may not see answers as a missing one
(404 ``Thread not found``). Deleting a thread deletes it with its messages, signals and inbox
(decision 156), refused while a run of it is running.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from threadline.gateway import mastra_shapes as shapes
from threadline.gateway import mastra_ui as ui
from threadline.gateway.mastra_http import allowed, body_of, gw, mastra_errors
from threadline.gateway.mastra_http import json_response as _json
from threadline.gateway.state import ApiError
from threadline.ids import new_id
from threadline.logging import get_logger
from threadline.store import queries, thread_rows

log = get_logger(__name__)

THREAD_FIELDS = ("createdAt", "updatedAt")


def _not_found() -> ApiError:
    return ApiError(404, "not_found", "Thread not found")


def _resource_param(request: Request, given: object) -> str:
    """The resource a thread list or a new thread is for: ``resourceId``, or the caller's only
    resource when it names one. Raises :class:`ShapeError` when none can be told, 403 when the
    caller may not act for it."""
    caller = gw(request).caller(request)
    if not isinstance(given, str) or not given:
        mine = [r for r in caller.resources if r != "*"]
        if len(mine) != 1 or "*" in caller.resources:
            raise shapes.ShapeError("resourceId is required")
        given = mine[0]
    allowed(request, given)
    return given


async def _visible_thread(request: Request, resource_hint: object) -> tuple[str, str]:
    """``(resource_id, thread_id)`` of the path's thread when the caller may see it (and it is
    ``resourceId``'s when that is given); 404 otherwise, as for a missing thread."""
    thread_id = request.path_params["thread_id"]
    caller = gw(request).caller(request)
    owner = await queries.thread_owner(gw(request).db, thread_id)
    if owner is None or not caller.may_act_for(owner) or (resource_hint and resource_hint != owner):
        raise _not_found()
    return owner, thread_id


async def _agent_memory(request: Request) -> dict[str, object]:
    gw(request).caller(request)
    agent_id = request.query_params.get("agentId")
    if not agent_id:
        raise shapes.ShapeError("agentId is required")
    row = await queries.read_agent(gw(request).db, agent_id)
    if row is None:
        raise ApiError(404, "not_found", "Agent not found")
    return dict(row.get("memory") or {})


@mastra_errors
async def status(request: Request) -> Response:
    """``{result}``: whether the agent keeps memory (Threadline has no observational memory)."""
    memory = await _agent_memory(request)
    return _json({"result": bool(memory.get("enabled", True)), "memoryType": "local",
                  "observationalMemory": {"enabled": False}})


@mastra_errors
async def config(request: Request) -> Response:
    return _json({"memoryType": "local", **shapes.memory_config(await _agent_memory(request))})


@mastra_errors
async def list_threads(request: Request) -> Response:
    q = request.query_params
    resource_id = _resource_param(request, q.get("resourceId"))
    page = shapes.page_of(q, per_page=shapes.THREADS_PER_PAGE, descending=True, fields=THREAD_FIELDS)
    rows, total = await queries.page_threads(gw(request).db, resource_id=resource_id, offset=page.offset,
                                             limit=page.limit, field=page.field, descending=page.descending,
                                             metadata=shapes.json_object(q.get("metadata"), "metadata"))
    return _json({**page.answer(total, rows), "threads": [shapes.thread_shape(r, resource_id) for r in rows]})


@mastra_errors
async def get_thread(request: Request) -> Response:
    resource_id, thread_id = await _visible_thread(request, request.query_params.get("resourceId"))
    row = await queries.read_thread(gw(request).db, resource_id, thread_id)
    if row is None:
        raise _not_found()
    return _json(shapes.thread_shape(row, resource_id))


@mastra_errors
async def create_thread(request: Request) -> Response:
    body = await body_of(request)
    resource_id = _resource_param(request, body.get("resourceId"))
    thread_id = body.get("threadId") or new_id("thread")
    if not isinstance(thread_id, str) or (body.get("title") is not None and not isinstance(body["title"], str)) \
            or (body.get("metadata") is not None and not isinstance(body["metadata"], dict)):
        raise shapes.ShapeError("threadId and title must be strings, metadata an object")
    row = await thread_rows.create_thread(gw(request).db, thread_id=thread_id, resource_id=resource_id,
                                          title=body.get("title"), metadata=body.get("metadata"))
    if row is None:  # the id is another resource's thread: refused as a write to it is on /v1
        raise _not_found()
    return _json(shapes.thread_shape(row, resource_id))


@mastra_errors
async def update_thread(request: Request) -> Response:
    body = await body_of(request)
    resource_id, thread_id = await _visible_thread(request, None)
    if body.get("resourceId") not in (None, resource_id):
        raise shapes.ShapeError("a thread belongs to one resource for good: resourceId cannot change")
    if (body.get("title") is not None and not isinstance(body["title"], str)) \
            or (body.get("metadata") is not None and not isinstance(body["metadata"], dict)):
        raise shapes.ShapeError("title must be a string, metadata an object")
    row = await thread_rows.update_thread(gw(request).db, thread_id=thread_id, resource_id=resource_id,
                                          title=body.get("title"), metadata=body.get("metadata"))
    if row is None:
        raise _not_found()
    return _json(shapes.thread_shape(row, resource_id))


@mastra_errors
async def delete_thread(request: Request) -> Response:
    """``{result: "Thread deleted"}``: the thread, its messages, signals and inbox are gone
    (decision 156); 409 ``run_active`` while a run of the thread is running (abort it first)."""
    resource_id, thread_id = await _visible_thread(request, request.query_params.get("resourceId"))
    outcome = await thread_rows.delete_thread(gw(request).db, thread_id=thread_id, resource_id=resource_id)
    if outcome == "missing":
        raise _not_found()
    if outcome == "active":
        raise ApiError(409, "run_active", "a run of this thread is running: abort it "
                                          "(POST /api/agents/:agentId/threads/abort), then delete the thread")
    log.info("thread deleted", thread_id=thread_id)
    return _json({"result": "Thread deleted"})


@mastra_errors
async def list_messages(request: Request) -> Response:
    """A page of the thread's stored messages (Mastra's stored form) and the same messages as
    the AI SDK's UI messages (``uiMessages``, :mod:`threadline.gateway.mastra_ui`). A running run's
    answer is left out until the run ends, as Mastra stores it
    (:func:`~threadline.gateway.mastra_shapes.settled_messages`); ``total`` counts what is served."""
    q = request.query_params
    resource_id, thread_id = await _visible_thread(request, q.get("resourceId"))
    if q.get("include") or q.get("filter"):
        raise shapes.ShapeError("include and filter are not supported: page through the thread's messages")
    page = shapes.page_of(q, per_page=shapes.MESSAGES_PER_PAGE, descending=False, fields=("createdAt",))
    db = gw(request).db
    running = await queries.active_run(db, resource_id=resource_id, thread_id=thread_id)
    rows, total = await queries.page_messages(db, resource_id=resource_id, thread_id=thread_id,
                                              offset=page.offset, limit=page.limit, descending=page.descending)
    settled = shapes.settled_messages(rows, running)
    answer = page.answer(total, rows)  # paged by the stored rows, so the next page starts where this one ends
    answer["total"] -= len(rows) - len(settled)
    messages = [shapes.message_shape(r, thread_id=thread_id, resource_id=resource_id) for r in settled]
    return _json({**answer, "messages": messages, "uiMessages": ui.ui_messages(messages)})


ROUTES = [
    Route("/api/memory/status", status, methods=["GET"]),
    Route("/api/memory/config", config, methods=["GET"]),
    Route("/api/memory/threads", list_threads, methods=["GET"]),
    Route("/api/memory/threads", create_thread, methods=["POST"]),
    Route("/api/memory/threads/{thread_id}", get_thread, methods=["GET"]),
    Route("/api/memory/threads/{thread_id}", update_thread, methods=["PATCH"]),
    Route("/api/memory/threads/{thread_id}", delete_thread, methods=["DELETE"]),
    Route("/api/memory/threads/{thread_id}/messages", list_messages, methods=["GET"]),
]
"""The memory routes of :data:`threadline.gateway.mastra_api.ROUTES`."""

"""The gateway's ASGI app (Starlette): the Python client's API over HTTP (:mod:`threadline.gateway.api`).

Writes go through the ingress topic like any client's (the app holds one
:class:`threadline.client.ThreadlineClient`); reads (messages, runs, threads, the inbox) come
from PostgreSQL, always filtered by the caller's resource. Errors are JSON ``{"error": {code,
message}}``; a thread that is missing and a thread of another resource get the same 404 body
(decision 51).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from importlib import resources
from typing import TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from threadline.client.client import BrokerUnavailableError, RequestFailed, SendResult
from threadline.client.kafka_transport import StreamsFullError
from threadline.gateway import api, editing, seam
from threadline.gateway import idempotency as idem
from threadline.gateway.auth import EDITOR, Caller, PrepareJwks
from threadline.gateway.cors import cors_middleware
from threadline.gateway.state import HIDDEN_CODES, NOT_FOUND, ApiError, Gateway
from threadline.gateway.streaming import EventStream, events, parse_event_id, until_expiry
from threadline.gateway.traced import ServerSpans
from threadline.logging import get_logger
from threadline.ops.server import readiness
from threadline.store import inbox_access as access
from threadline.store import paging, queries
from threadline.store.db import Database

__all__ = ["HANDLERS", "NOT_FOUND", "ApiError", "Gateway", "make_app"]

log = get_logger(__name__)

def _json(data: object, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data, default=str), status_code=status, media_type="application/json",
                    headers=headers)


_Body = TypeVar("_Body", bound=BaseModel)


async def _body(request: Request, model: type[_Body]) -> _Body:
    try:
        return model.model_validate(orjson.loads(await request.body() or b"{}"))
    except orjson.JSONDecodeError:
        raise ApiError(422, "invalid_json", "the body is not JSON") from None
    except ValidationError as exc:
        raise ApiError(422, "validation_failed", "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])) from None


def _gw(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway  # set by make_app
    return gateway


Handler = Callable[[Request], Awaitable[Response]]


def _errors(handler: Handler) -> Handler:
    """Turn :class:`ApiError`, ingress error replies, an unreachable broker and timeouts into JSON answers."""

    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as exc:
            return _json(exc.body, exc.status)
        except RequestFailed as exc:
            if exc.code in HIDDEN_CODES:
                return _json(NOT_FOUND, 404)
            return _json({"error": {"code": exc.code, "message": exc.reply.message}}, 422)
        except StreamsFullError as exc:  # at capacity: another gateway, or this one later
            return _json({"error": {"code": "at_capacity", "message": str(exc)}}, 503,
                         {"Retry-After": str(exc.retry_after_s)})
        except BrokerUnavailableError:
            return _json({"error": {"code": "broker_unavailable", "message": "Kafka cannot be reached"}}, 503)
        except TimeoutError:
            return _json({"error": {"code": "timeout", "message": "no reply from ingress in time"}}, 504)
        except idem.KeyRefused as exc:
            return _json({"error": {"code": exc.code, "message": str(exc)}}, exc.status)
        except paging.CursorError as exc:
            return _json({"error": {"code": "invalid_cursor", "message": str(exc)}}, 422)
        except ValueError as exc:
            return _json({"error": {"code": "invalid_argument", "message": str(exc)}}, 422)

    wrapped.__name__ = handler.__name__
    return wrapped


# --- writes (through ingress) --------------------------------------------------------------------
async def _key_scope(request: Request) -> tuple[Database, str]:
    return _gw(request).db, _gw(request).resource(request)


def _idempotent(handler: Handler) -> Handler:
    """A write that honours an ``Idempotency-Key`` (:func:`threadline.gateway.idempotency.honouring`):
    the caller is authorised for the path's resource first (401/403), then the key decides."""
    return idem.honouring(handler, _key_scope)


async def _accepted(result: SendResult) -> Response:
    """202 with the ``accepted`` reply; for a ``persist`` send, once the message is durable, with
    the ``persisted`` reply under ``persisted`` (what the Python client's ``persisted`` resolves to)."""
    reply = await result.accepted
    body = reply.dump()
    if result.persisted is not None and reply.action == "persist":
        body["persisted"] = (await result.persisted).dump()
    return _json(body, 202)


@_errors
@_idempotent
async def send_message(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.writable_thread(request)
    b = await _body(request, api.SendMessageBody)
    return await _accepted(await gw.client.send_message(b.message, resource_id=resource_id, thread_id=thread_id,
                                                        agent_id=b.agent_id, run_id=b.run_id, if_active=b.if_active,
                                                        if_idle=b.if_idle))


@_errors
@_idempotent
async def queue_message(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.writable_thread(request)
    b = await _body(request, api.QueueMessageBody)
    return await _accepted(await gw.client.queue_message(b.message, resource_id=resource_id, thread_id=thread_id,
                                                         agent_id=b.agent_id, if_idle=b.if_idle))


@_errors
@_idempotent
async def send_signal(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.writable_thread(request)
    b = await _body(request, api.SendSignalBody)
    return await _accepted(await gw.client.send_signal(b.signal, resource_id=resource_id, thread_id=thread_id,
                                                       agent_id=b.agent_id, run_id=b.run_id, if_active=b.if_active,
                                                       if_idle=b.if_idle))


@_errors
@_idempotent
async def send_state_signal(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.writable_thread(request)
    b = await _body(request, api.SendStateSignalBody)
    return await _accepted(await gw.client.send_state_signal(b.state, resource_id=resource_id, thread_id=thread_id,
                                                             agent_id=b.agent_id, if_active=b.if_active,
                                                             if_idle=b.if_idle))


@_errors
@_idempotent
async def send_notification(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.writable_thread(request)
    b = await _body(request, api.NotificationBody)
    reply = await gw.client.send_notification_signal(b.notifications, resource_id=resource_id, thread_id=thread_id,
                                                     agent_id=b.agent_id, if_idle=b.if_idle)
    return _json(reply.dump())


@_errors
@_idempotent
async def stream(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.writable_thread(request)
    b = await _body(request, api.RunBody)
    return await _accepted(await gw.client.stream(b.message, resource_id=resource_id, thread_id=thread_id,
                                                  agent_id=b.agent_id, options=b.options, thread=b.thread))


@_errors
@_idempotent
async def generate(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.writable_thread(request)
    b = await _body(request, api.GenerateBody)
    result = await gw.client.generate(b.message, resource_id=resource_id, thread_id=thread_id, agent_id=b.agent_id,
                                      options=b.options, thread=b.thread, timeout_s=b.timeout_s)
    return _json(result.dump())


@_errors
async def abort(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.existing_thread(request)
    b = await _body(request, api.AbortBody)
    aborted = await gw.client.abort(resource_id=resource_id, thread_id=thread_id, agent_id=b.agent_id, run_id=b.run_id)
    return _json({"aborted": aborted})


@_errors
async def approve_tool_call(request: Request) -> Response:
    return await _answer_tool_call(request, approved=True)


@_errors
async def decline_tool_call(request: Request) -> Response:
    return await _answer_tool_call(request, approved=False)


async def _answer_tool_call(request: Request, *, approved: bool) -> Response:
    """An approve or decline (decision 227): ``{resolved, status, run_id, tool_call_id}``."""
    gw = _gw(request)
    resource_id, thread_id = await gw.existing_thread(request)
    b = await _body(request, api.ToolCallBody)
    if approved:
        answer = await gw.client.approve_tool_call(resource_id=resource_id, thread_id=thread_id, run_id=b.run_id,
                                                   tool_call_id=b.tool_call_id, agent_id=b.agent_id)
    else:
        answer = await gw.client.decline_tool_call(resource_id=resource_id, thread_id=thread_id, run_id=b.run_id,
                                                   tool_call_id=b.tool_call_id, agent_id=b.agent_id, reason=b.reason)
    return _json(answer.model_dump(include={"resolved", "status", "run_id", "tool_call_id"}))


# --- reads (PostgreSQL, by resource) -------------------------------------------------------------
def _rows(rows: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    return [{k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in dict(r).items()} for r in rows]


@_errors
async def list_threads(request: Request) -> Response:
    gw = _gw(request)
    resource_id = gw.resource(request)
    limit = max(1, min(int(request.query_params.get("limit", "100")), 1000))
    return _json({"threads": _rows(await queries.list_threads(gw.db, resource_id=resource_id, limit=limit))})


def _page(request: Request) -> tuple[str | None, int]:
    """``(cursor, limit)`` of a list read's query (decision 221); 422 ``invalid_argument`` for a bad limit."""
    return request.query_params.get("cursor"), paging.page_limit(request.query_params.get("limit"))


@_errors
async def list_messages(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.existing_thread(request)
    cursor, limit = _page(request)
    live_tail = request.query_params.get("live_tail") == "true"
    async with gw.db.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        runs = await queries.list_runs(conn, resource_id=resource_id, thread_id=thread_id) if live_tail else []
        rows, after = await queries.message_page(conn, resource_id=resource_id, thread_id=thread_id,
                                                 cursor=cursor, limit=limit)
    if not live_tail:
        return _json({"messages": _rows(rows), "next_cursor": after})
    cut = seam.seam(runs)  # for a view with a live tail: the turn in progress comes whole from the stream (215)
    return _json({"messages": _rows(seam.stored_part(rows, cut)), "next_cursor": after,
                  "stream": {"after_run": cut.after_run}})


@_errors
async def list_runs(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.existing_thread(request)
    cursor, limit = _page(request)
    rows, after = await queries.run_page(gw.db, resource_id=resource_id, thread_id=thread_id, cursor=cursor,
                                         limit=limit)
    return _json({"runs": _rows(rows), "next_cursor": after})


@_errors
async def get_thread(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.existing_thread(request)
    row = await queries.read_thread(gw.db, resource_id, thread_id)
    if row is None:
        raise ApiError(404, "not_found", "", NOT_FOUND)
    return _json(row)


@_errors
async def active_run(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.existing_thread(request)
    return _json({"run_id": await queries.active_run(gw.db, resource_id=resource_id, thread_id=thread_id)})


@_errors
async def agent_details(request: Request) -> Response:
    """What ingress published of one agent (any authenticated caller: agents are not a resource's)."""
    gw = _gw(request)
    gw.caller(request)
    found = await queries.read_agent(gw.db, request.path_params["agent_id"])
    if found is None:
        raise ApiError(404, "not_found", "no such agent")
    return _json(found)


@_errors
async def list_agents(request: Request) -> Response:
    gw = _gw(request)
    gw.caller(request)
    return _json({"agents": await queries.list_agents(gw.db)})


def _editor_caller(request: Request) -> Caller:
    caller = _gw(request).caller(request)
    if not caller.has_scope(EDITOR):
        raise ApiError(403, "forbidden", "editing agents needs the editor scope")
    return caller


@_errors
async def get_editor(request: Request) -> Response:
    _editor_caller(request)
    found = await editing.view(_gw(request).db, request.path_params["agent_id"])
    if found is None:
        raise ApiError(404, "not_found", "no such agent")
    return _json(found, headers={"ETag": editing.etag(found["version"])})


@_errors
async def save_editor(request: Request) -> Response:
    caller = _editor_caller(request)
    body = (await _body(request, api.EditorBody)).model_dump(exclude_unset=True)
    try:  # the version it was built on (decision 200): 428 without one, 412 when another save came first
        expected = editing.precondition(request.headers.get("if-match"), body.pop("version", None))
        saved = await editing.save(_gw(request).db, request.path_params["agent_id"], body, by=caller.via,
                                   expected=expected)
    except editing.PreconditionRequired as exc:
        raise ApiError(428, "precondition_required", str(exc)) from None
    except editing.VersionConflict as exc:
        raise ApiError(412, "version_conflict", str(exc), {"error": {
            "code": "version_conflict", "message": str(exc), "current_version": exc.current}}) from None
    except editing.EditorLocked as exc:
        raise ApiError(403, "editor_locked", str(exc)) from None
    if saved is None:
        raise ApiError(404, "not_found", "no such agent")
    log.info("editor overrides saved", agent_id=request.path_params["agent_id"], version=saved["version"],
             stripped=saved["stripped"][:10])
    return _json(saved, headers={"ETag": editing.etag(saved["version"])})


@_errors
async def list_inbox(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.existing_thread(request)
    cursor, limit = _page(request)
    async with gw.db.connection() as conn:
        records, after = await access.page_records(conn, resource_id=resource_id, thread_id=thread_id,
                                                   status=request.query_params.get("status"), cursor=cursor,
                                                   limit=limit)
    return _json({"records": records, "next_cursor": after})


@_errors
async def read_notification(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.existing_thread(request)
    async with gw.db.connection() as conn:
        record = await access.read_record(conn, resource_id=resource_id, thread_id=thread_id,
                                          record_id=request.path_params["record_id"])
    if record is None:
        raise ApiError(404, "not_found", "no such record in this thread")
    return _json(record)


@_errors
async def mark_notification(request: Request) -> Response:
    gw = _gw(request)
    resource_id, thread_id = await gw.existing_thread(request)
    b = await _body(request, api.MarkBody)
    async with gw.db.connection() as conn:
        record = await access.mark(conn, resource_id=resource_id, thread_id=thread_id,
                                   record_id=request.path_params["record_id"], status=b.status)
    if record is None:
        raise ApiError(404, "not_found", "no such record in this thread")
    return _json(record)


@_errors
async def events_(request: Request) -> Response:
    gw = _gw(request)
    gw.resource(request, query_token=True)  # who first (401 / 403), then capacity, then the store
    gw.refuse_when_full()
    resource_id, thread_id = await gw.existing_thread(request, query_token=True)
    expires_at = gw.caller(request, query_token=True).expires_at  # the stream ends then (decision 216)
    try:
        resume = parse_event_id(request.headers.get("last-event-id") or request.query_params.get("last_event_id"))
    except ValueError as exc:
        raise ApiError(422, "invalid_last_event_id", str(exc)) from None
    start = request.query_params.get("from", "end")
    if start not in ("beginning", "end"):
        raise ApiError(422, "invalid_argument", "from must be beginning or end")
    from_time_ms = None if resume is not None else request.query_params.get("from_time_ms")  # a resume wins (D01)
    if from_time_ms is not None and not from_time_ms.isdigit():
        raise ApiError(422, "invalid_argument", "from_time_ms must be ms since the epoch")
    after_run = request.query_params.get("after_run") or None
    if after_run is not None and resume is None and from_time_ms is None:  # the seam of GET …/messages
        runs = await queries.list_runs(gw.db, resource_id=resource_id, thread_id=thread_id)
        created = next((r["created_at"] for r in runs if r["run_id"] == after_run), None)
        if created is None:
            raise ApiError(422, "invalid_argument", "after_run must be a run of this thread")
        from_time_ms = str(seam.start_ms(created))
    sub = await gw.client.subscribe_to_thread(resource_id, thread_id,
                                              from_beginning=resume is not None or start == "beginning",
                                              from_time_ms=int(from_time_ms) if from_time_ms else None)
    log.info("stream opened", thread_id=thread_id, resumed=resume is not None, start=start)
    return EventStream(until_expiry(events(sub, resume=resume, after_run=after_run), expires_at),
                       on_close=sub.unsubscribe, ping=15, send_timeout=30,
                       headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


events_.__name__ = "events"


# --- the rest ------------------------------------------------------------------------------------
async def openapi_doc(_: Request) -> Response:
    return Response(api.openapi_json(), media_type="application/json")


async def studio(_: Request) -> Response:
    """Threadline Studio: one HTML page, plain JavaScript over this API and EventSource."""
    page = resources.files("threadline.gateway").joinpath("studio.html").read_text(encoding="utf-8")
    return HTMLResponse(page, headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                                       "Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline'; "
                                                                  "style-src 'unsafe-inline'; connect-src 'self'"})


async def healthz(_: Request) -> Response:
    return Response("ok", media_type="text/plain")


async def readyz(request: Request) -> Response:
    return await readiness(request.app.state.checks)


HANDLERS: dict[str, Handler] = {h.__name__: h for h in (
    list_threads, send_message, list_messages, queue_message, send_signal, send_state_signal, send_notification,
    stream, generate, abort, list_runs, events_, list_inbox, read_notification, mark_notification, get_thread,
    active_run, agent_details, list_agents, get_editor, save_editor)}
HANDLERS |= {h.__name__: h for h in (approve_tool_call, decline_tool_call)}  # tool approval (decision 227)
"""operationId → handler: every endpoint of :data:`threadline.gateway.api.ENDPOINTS` has one."""


def make_app(gateway: Gateway, *, checks: dict[str, Callable[[], Awaitable[bool]]] | None = None,
             start: Callable[[], Awaitable[None]] | None = None, stop: Callable[[], Awaitable[None]] | None = None,
             extra_routes: Sequence[BaseRoute] = (), cors_origins: Sequence[str] = ()) -> Starlette:
    """The ASGI app over ``gateway``; ``start``/``stop`` run in its lifespan, ``checks`` decide ``/readyz``;
    ``extra_routes`` (Mastra's ``/api``: :data:`threadline.gateway.mastra_api.ROUTES`) are served too;
    browsers from ``cors_origins`` may call it (CORS, preflight answered; none: same origin only)."""
    routes: list[BaseRoute] = [Route(ep.path, HANDLERS[ep.operation_id], methods=[ep.method]) for ep in api.ENDPOINTS]
    routes += extra_routes
    routes += [Route("/openapi.json", openapi_doc), Route("/studio", studio), Route("/healthz", healthz),
               Route("/readyz", readyz), Route("/", lambda _: RedirectResponse("/studio"))]

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if start is not None:
            await start()
        try:
            yield
        finally:
            if stop is not None:
                await stop()

    middleware = [Middleware(ServerSpans), *cors_middleware(cors_origins), Middleware(PrepareJwks, jwks=gateway.auth.jwks)]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.gateway = gateway
    app.state.checks = checks or {}
    return app

"""The gateway's HTTP API as data: request bodies (pydantic models, validated by the handlers),
the endpoint table, and the OpenAPI 3.1 document built from both (``docs/openapi.json``, kept
equal to :func:`openapi` by ``tests/unit/test_gateway_api.py``; regenerate with
``python -m threadline.gateway.api > docs/openapi.json``).

Every thread path is ``/v1/resources/{resource_id}/threads/{thread_id}/…``: the resource in
the path is the one the caller must be allowed to act for (403 otherwise); a thread that does
not exist and a thread of another resource get the same 404 body.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from threadline.events.options import check_options
from threadline.store import paging

# ---------------------------------------------------------------- request bodies


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SendMessageBody(_Body):
    """``sendMessage``: into the active run, or wake the idle thread."""

    message: Any = Field(description="a string, or a message {role?, content, attributes?, metadata?}")
    agent_id: str = Field(min_length=1)
    run_id: str | None = None
    if_active: dict[str, Any] | None = Field(default=None, description="{behavior: deliver|persist|discard}")
    if_idle: dict[str, Any] | None = Field(default=None, description="{behavior: wake|persist|discard, stream_options?}")


class QueueMessageBody(_Body):
    """``queueMessage``: the next turn after the active run, or a run now."""

    message: Any
    agent_id: str = Field(min_length=1)
    if_idle: dict[str, Any] | None = None


class SendSignalBody(_Body):
    """``sendSignal``: ``{type, contents, tag_name?, attributes?, metadata?}``."""

    signal: dict[str, Any]
    agent_id: str = Field(min_length=1)
    run_id: str | None = None
    if_active: dict[str, Any] | None = None
    if_idle: dict[str, Any] | None = None


class SendStateSignalBody(_Body):
    """``sendStateSignal``: ``{id, cache_key, contents, mode?, value?|delta?}``."""

    state: dict[str, Any]
    agent_id: str = Field(min_length=1)
    if_active: dict[str, Any] | None = None
    if_idle: dict[str, Any] | None = None


class NotificationBody(_Body):
    """``sendNotificationSignal``: one notification or several."""

    notifications: dict[str, Any] | list[dict[str, Any]]
    agent_id: str = Field(min_length=1)
    if_idle: dict[str, Any] | None = None


class RunBody(_Body):
    """``agent.stream`` / ``agent.generate`` with the thread as memory."""

    message: Any
    agent_id: str = Field(min_length=1)
    options: dict[str, Any] = Field(default_factory=dict)
    thread: dict[str, Any] | None = Field(default=None, description="{title?, metadata?} of a new thread")

    @field_validator("options")
    @classmethod
    def _known_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_options(value)  # an unknown option: 422 naming it (docs/decisions.md#unknown-options)


class GenerateBody(RunBody):
    timeout_s: float = Field(default=300.0, gt=0, le=900, description="how long to wait for the run's result")


class AbortBody(_Body):
    """Abort the thread's active run (or ``run_id``)."""

    run_id: str | None = None
    agent_id: str | None = None


class ToolCallBody(_Body):
    """Approve or decline the call ``tool_call_id`` the run ``run_id`` holds for approval."""

    run_id: str
    tool_call_id: str
    agent_id: str | None = None
    reason: str | None = None
    """A decline's reason, what the model reads (an approval ignores it)."""


class EditorBody(BaseModel):
    """An agent's editor overrides (they replace the stored ones): fields its ``editor`` option
    locks, tools its code does not define and any other key (``id``, ``name``, ``model``) are
    stripped and named in the answer's ``stripped``."""

    model_config = ConfigDict(extra="allow")
    instructions: str | None = Field(default=None, description="the agent's instructions (null: the code's)")
    tools: dict[str, dict[str, Any]] | None = Field(default=None, description="{tool_id: {description}}")
    version: int | None = Field(default=None, description=(
        "the version the save was built on (GET's version; 0: none stored), or send If-Match: GET's ETag; "
        "a save naming neither answers 428, one naming an older version 412 (decision 200)"))


class MarkBody(_Body):
    status: Literal["seen", "dismissed", "archived"]


# ---------------------------------------------------------------- the endpoint table

THREAD = "/v1/resources/{resource_id}/threads/{thread_id}"


@dataclass(frozen=True)
class Endpoint:
    """One operation: ``method`` ``path``, its OpenAPI ``operation_id`` (= the handler's name in
    :mod:`threadline.gateway.app`), ``body`` model, success ``status`` and ``query`` parameters
    (name → description)."""

    method: str
    path: str
    operation_id: str
    summary: str
    body: type[BaseModel] | None = None
    status: int = 200
    query: dict[str, str] = field(default_factory=dict)
    sse: bool = False


PAGE_QUERY = {"limit": f"at most this many rows (default {paging.DEFAULT_LIMIT}, at most {paging.MAX_LIMIT}); a page "
                        f"also ends once its big text reaches {paging.PAGE_BYTES // 2**20} MiB",
              "cursor": "the previous page's next_cursor: the page after it (decision 221)"}
"""The paging parameters of a thread's list reads (:mod:`threadline.store.paging`)."""

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("GET", "/v1/resources/{resource_id}/threads", "list_threads",
             "The resource's threads, most recently updated first", query={"limit": "at most this many (default 100)"}),
    Endpoint("POST", f"{THREAD}/messages", "send_message", "sendMessage: deliver into the active run or wake the thread",
             SendMessageBody, 202),
    Endpoint("GET", f"{THREAD}/messages", "list_messages",
             "A page of the thread's stored messages, oldest first: {messages, next_cursor} (null: the last page)",
             query={**PAGE_QUERY,
                    "live_tail": "true: leave out the turn in progress and answer stream.after_run, the newest run "
                                 "held (GET …/events?after_run= sends the rest; decision 215)"}),
    Endpoint("POST", f"{THREAD}/queue", "queue_message", "queueMessage: the next turn after the active run",
             QueueMessageBody, 202),
    Endpoint("POST", f"{THREAD}/signals", "send_signal", "sendSignal: system context into the thread", SendSignalBody, 202),
    Endpoint("POST", f"{THREAD}/state", "send_state_signal", "sendStateSignal: a state lane's new value",
             SendStateSignalBody, 202),
    Endpoint("POST", f"{THREAD}/notifications", "send_notification", "sendNotificationSignal: into the thread's inbox",
             NotificationBody),
    Endpoint("POST", f"{THREAD}/stream", "stream", "agent.stream: start a run; its chunks come on /events",
             RunBody, 202),
    Endpoint("POST", f"{THREAD}/generate", "generate", "agent.generate: start a run and wait for its result",
             GenerateBody),
    Endpoint("POST", f"{THREAD}/abort", "abort", "Abort the active run (queued messages still run)", AbortBody),
    Endpoint("POST", f"{THREAD}/approve-tool-call", "approve_tool_call",
             "approveToolCall: run a call the run holds for approval, once; the run goes on ({resolved, status})",
             ToolCallBody),
    Endpoint("POST", f"{THREAD}/decline-tool-call", "decline_tool_call",
             "declineToolCall: the held call never runs, the model reads the reason ({resolved, status})",
             ToolCallBody),
    Endpoint("GET", f"{THREAD}/runs", "list_runs", "A page of the thread's runs, oldest first: {runs, next_cursor}",
             query=PAGE_QUERY),
    Endpoint("GET", f"{THREAD}/events", "events",
             "Server-Sent Events: the thread's chunks without duplicates or dead attempts; resume with Last-Event-ID",
             query={"from": "beginning (replay what the topic retains) or end (default: only what comes next)",
                    "last_event_id": "resume after this event id (as the Last-Event-ID header)",
                    "from_time_ms": "start at the first chunk written at or after this time (ms since the epoch)",
                    "after_run": "only the chunks of the runs after this one, each from its first chunk (the "
                                 "stream.after_run of GET …/messages)",
                    "access_token": "the API key or JWT, for browsers' EventSource (which cannot set headers)"},
             sse=True),
    Endpoint("GET", THREAD, "get_thread", "The thread: {id, resource_id, title, metadata, created_at, updated_at}"),
    Endpoint("GET", f"{THREAD}/active-run", "active_run",
             "The thread's active run: {run_id} (null when idle), from the thread's lease"),
    Endpoint("GET", "/v1/agents/{agent_id}", "agent_details",
             "One agent as the cluster serves it: {id, name, description, metadata, dynamic_metadata, memory}"),
    Endpoint("GET", "/v1/agents", "list_agents", "The agents the cluster serves: {agents: [{id, name, description}]}"),
    Endpoint("GET", "/v1/agents/{agent_id}/editor", "get_editor",
             "An agent's editable fields: {editor, code: {instructions, tools}, overrides, version} and their ETag "
             "(the editor scope)"),
    Endpoint("PUT", "/v1/agents/{agent_id}/editor", "save_editor",
             "Save an agent's editor overrides built on a version (If-Match or version: 428 without, 412 when "
             "stale), locked fields stripped; applied at its next run (the editor scope)",
             EditorBody),
    Endpoint("GET", f"{THREAD}/inbox", "list_inbox",
             "A page of the thread's notification records (no payloads), oldest first: {records, next_cursor}",
             query={"status": "only records of this status (e.g. pending)", **PAGE_QUERY}),
    Endpoint("GET", f"{THREAD}/inbox/{{record_id}}", "read_notification", "One record with its payload and metadata"),
    Endpoint("POST", f"{THREAD}/inbox/{{record_id}}", "mark_notification", "Mark a record seen, dismissed or archived",
             MarkBody),
)

IDEMPOTENT = frozenset({"send_message", "queue_message", "send_signal", "send_state_signal", "send_notification",
                        "stream", "generate"})
"""The writes that take an ``Idempotency-Key`` header (decision 213)."""

_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["code", "message"],
    "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}}}
_ERRORS = {
    "401": "no valid API key or token",
    "403": "the caller may not act for this resource",
    "404": "no such thread (or record) for this resource; a thread of another resource looks the same",
    "409": "the Idempotency-Key was used for another request (idempotency_key_reused)",
    "422": "the body is not valid, or ingress refused the request (code, message)",
    "503": "Kafka or PostgreSQL cannot be reached",
    "504": "no reply from ingress in time",
}


def _parameters(ep: Endpoint) -> list[dict[str, Any]]:
    params = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
              for name in ("resource_id", "thread_id", "record_id", "agent_id") if "{" + name + "}" in ep.path]
    params += [{"name": name, "in": "query", "required": False, "description": text, "schema": {"type": "string"}}
               for name, text in ep.query.items()]
    if ep.operation_id in IDEMPOTENT:
        params.append({"name": "Idempotency-Key", "in": "header", "required": False, "schema": {"type": "string"},
                       "description": "1-255 visible ASCII characters: a retry with the same key and request is "
                                      "answered with the first answer (Idempotency-Replayed: true), kept 24 h"})
    if ep.sse:
        params.append({"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"},
                       "description": "the id of the last event received: the stream goes on after it"})
    return params


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 document of :data:`ENDPOINTS` (bodies from the pydantic models)."""
    paths: dict[str, dict[str, Any]] = {}
    schemas: dict[str, Any] = {"Error": _ERROR}
    for ep in ENDPOINTS:
        op: dict[str, Any] = {"operationId": ep.operation_id, "summary": ep.summary,
                              "security": [{"bearer": []}, {"apiKey": []}]}
        if params := _parameters(ep):
            op["parameters"] = params
        if ep.body is not None:
            schema = ep.body.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub in schema.pop("$defs", {}).items():
                schemas[name] = sub
            schemas[ep.body.__name__] = schema
            op["requestBody"] = {"required": True, "content": {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{ep.body.__name__}"}}}}
        ok = ({"text/event-stream": {"schema": {"type": "string", "description":
               "events: `subscribed` (data {offset, topic, partition?}; id: the resume point of its start, "
               "`<offset - 1>`) once, then one unnamed event per chunk (data: the chunk JSON, id: "
               "`<offset>:<seq>:<runId>`; in the shared chunk layout `<partition>/<offset>:<seq>:<runId>`)"}}} if ep.sse else
              {"application/json": {"schema": {"type": "object"}}})
        op["responses"] = {str(ep.status): {"description": "ok", "content": ok},
                           **{code: {"description": text, "content": {"application/json": {
                               "schema": {"$ref": "#/components/schemas/Error"}}}} for code, text in _ERRORS.items()}}
        paths.setdefault(ep.path, {})[ep.method.lower()] = op
    return {"openapi": "3.1.0",
            "info": {"title": "Threadline gateway", "version": "1",
                     "description": "Mastra's Agent thread API over HTTP and Server-Sent Events (docs/gateway.md)."},
            "paths": paths,
            "components": {"schemas": schemas, "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "an API key or a JWT"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}}}}


def openapi_json() -> bytes:
    """:func:`openapi` as the bytes of ``docs/openapi.json`` (sorted keys, indented, newline)."""
    return orjson.dumps(openapi(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


if __name__ == "__main__":
    sys.stdout.buffer.write(openapi_json())

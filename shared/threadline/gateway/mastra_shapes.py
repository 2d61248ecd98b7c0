"""Pure translations between Mastra's server API (``@mastra/client-js`` 1.47's routes under
``/api``) and Threadline's client and read model (decision 132). No I/O here: the handlers of
:mod:`threadline.gateway.mastra_api` and :mod:`threadline.gateway.mastra_memory` call these.

Mastra's names are kept on the wire (``resourceId``, ``threadId``, ``createdAt``); times are
ISO-8601 text, as Mastra's JSON has them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from threadline.events.chunks import MODEL_VERSION

DONE = b"data: [DONE]\n\n"
"""The last line of a Mastra stream response (``processMastraStream`` stops there)."""
KEEP_ALIVE = b": keep-alive\n\n"
"""An SSE comment: keeps proxies from closing a quiet stream; every SSE reader skips it."""
THREADS_PER_PAGE = 100
"""Mastra's default ``perPage`` of ``GET /memory/threads``."""
MESSAGES_PER_PAGE = 40
"""Mastra's default ``perPage`` of ``GET /memory/threads/:threadId/messages``."""
MAX_PER_PAGE = 1000
"""The largest page served (``perPage=false`` asks for every row: served up to this many)."""
_RUN_KEYS = frozenset({"messages", "memory", "resourceId", "threadId", "runId", "abortSignal", "clientTools",
                       "requestContext"})


class ShapeError(ValueError):
    """A request Threadline cannot serve as asked: answered 400 with the message (Mastra's
    ``{error}`` body)."""


def error_body(message: str, code: str) -> dict[str, str]:
    """Mastra's error body ``{error: <message>}``, with Threadline's ``code`` beside it."""
    return {"error": message, "code": code}


EXPIRED_MESSAGE = "the credential that opened this stream has expired: open it again with a valid one"
EXPIRED_CHUNK = {"type": "error", "payload": {"error": {"name": "TokenExpired", "code": "token_expired",
                                                       "message": EXPIRED_MESSAGE}}}
"""Mastra's ``error`` chunk that ends a stream at its credential's expiry (decision 216)."""


def sse_data(chunk: Mapping[str, Any]) -> bytes:
    """One chunk as Mastra writes it: ``data: <json>`` and a blank line (``\\n``, never ``\\r\\n``:
    ``processMastraStream`` splits on ``\\n\\n``)."""
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


# --- agents -------------------------------------------------------------------------------------
def tool_shape(tool_id: str, description: str | None, schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """Mastra's serialised tool: ``{id, description, inputSchema?}`` (the JSON Schema as JSON
    text, as ``@mastra/server`` stringifies it; absent when unknown)."""
    out: dict[str, Any] = {"id": tool_id, "description": description or ""}
    if schema is not None:
        out["inputSchema"] = orjson.dumps(schema).decode()
    return out


@dataclass(frozen=True)
class CodeFacts:
    """What only the agents' code knows (the gateway reads it when it can import the agents
    module): each tool's JSON Schema, and the model as ``provider/model``."""

    schemas: Mapping[str, Mapping[str, Any]]
    model: str | None


def agent_shape(row: Mapping[str, Any], editable: Mapping[str, Any] | None, facts: CodeFacts | None) -> dict[str, Any]:
    """Mastra's ``GET /agents/:agentId`` answer from the published agent ``row`` (``{id, name,
    description, metadata, memory}``), its editor view (instructions and tool descriptions,
    overrides applied) and the code's :class:`CodeFacts`. Unknown fields are left out, never
    guessed; features Threadline has not (workflows, skills, workspace, browser) answer as
    Mastra does for an agent without them."""
    code = (editable or {}).get("code") or {}
    overrides = (editable or {}).get("overrides") or {}
    instructions = overrides.get("instructions") or code.get("instructions")
    tools: dict[str, Any] = {}
    for tool_id, description in (code.get("tools") or {}).items():
        described = ((overrides.get("tools") or {}).get(tool_id) or {}).get("description") or description
        tools[tool_id] = tool_shape(tool_id, described, (facts.schemas.get(tool_id) if facts else None))
    out: dict[str, Any] = {
        "id": row["id"], "name": row["name"], "description": row.get("description") or "",
        "metadata": row.get("metadata") or {}, "tools": tools, "agents": {}, "workflows": {}, "skills": [],
        "workspaceTools": [], "browserTools": [], "hasBrowser": False, "inputProcessors": [],
        "outputProcessors": [], "supportsMemory": True, "source": "code", "defaultOptions": {}}
    if instructions is not None:
        out["instructions"] = instructions
    if editable is not None:
        out["editor"] = editable.get("editor")
    if facts is not None and facts.model and "/" in facts.model:
        out["provider"], _, out["modelId"] = facts.model.partition("/")
    out["modelVersion"] = MODEL_VERSION  # the chunks' modelMetadata.modelVersion: Studio sends mid-run on v2/v3
    return out


# --- runs: the request body ---------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """Where a run or a signal goes: the resource, the thread, and the ``memory.thread`` object's
    ``{title, metadata}`` (``None`` when the thread was named by its id)."""

    resource_id: str
    thread_id: str
    thread: dict[str, Any] | None = None


def memory_target(body: Mapping[str, Any]) -> Target:
    """The :class:`Target` of a generate/stream body: ``memory: {resource, thread}`` (``thread``
    an id or ``{id, title?, metadata?}``), or ``resourceId`` and ``threadId``.

    Raises:
        ShapeError: no thread or no resource (Threadline runs every call on a memory thread).
    """
    memory = body.get("memory") or {}
    thread = memory.get("thread", body.get("threadId"))
    resource = memory.get("resource", body.get("resourceId"))
    thread_id = thread.get("id") if isinstance(thread, dict) else thread
    if not isinstance(resource, str) or not resource or not isinstance(thread_id, str) or not thread_id:
        raise ShapeError("memory.resource and memory.thread are required: Threadline runs every agent call "
                         "on a memory thread")
    extra = {k: thread[k] for k in ("title", "metadata") if isinstance(thread, dict) and thread.get(k) is not None}
    return Target(resource, thread_id, extra or None)


def run_options(body: Mapping[str, Any]) -> dict[str, Any]:
    """The run options of a generate/stream body (Mastra's camelCase names are kept: the ingress
    maps them), without the message, the memory target and ``undefined`` fields.

    Raises:
        ShapeError: ``clientTools`` given (tools run in the cluster's workers, never in the caller).
    """
    if body.get("clientTools"):
        raise ShapeError("clientTools are not supported: Threadline runs tools in its workers")
    out = {k: v for k, v in body.items() if k not in _RUN_KEYS and v is not None}
    if body.get("requestContext"):
        out["requestContext"] = body["requestContext"]
    return out


def message_input(message: Any) -> Any:
    """A Mastra message (a string, parts, or ``{contents, attributes?, metadata?, providerOptions?}``)
    as Threadline's client takes it; ``messages`` lists of ``{role, content}`` keep their last
    user turn's content (Threadline's memory holds the history)."""
    if isinstance(message, dict) and "contents" in message:
        out = {k: v for k, v in message.items() if k != "providerOptions"}
        if message.get("providerOptions") is not None:
            out["provider_options"] = message["providerOptions"]
        return out
    if isinstance(message, list) and message and all(isinstance(m, dict) and "role" in m for m in message):
        users = [m for m in message if m.get("role") == "user"]
        if not users:
            raise ShapeError("messages must hold a user message")
        return users[-1].get("content", "")
    return message


def if_active(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``ifActive`` as Threadline's ``if_active`` (the same fields)."""
    return dict(value) if value else None


def if_idle(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``ifIdle`` (``{behavior, attributes, streamOptions}``) as Threadline's ``if_idle``
    (``stream_options``).

    Raises:
        ShapeError: ``streamOptions.clientTools`` given.
    """
    if not value:
        return None
    out = {k: v for k, v in value.items() if k != "streamOptions" and v is not None}
    if value.get("streamOptions"):
        out["stream_options"] = run_options(value["streamOptions"])
    return out


# --- answers ------------------------------------------------------------------------------------
def accepted_shape(reply: Mapping[str, Any]) -> dict[str, Any]:
    """Mastra's ``{accepted: true, runId, signal?}`` of an ``accepted`` reply; Threadline's
    ``action`` beside it (``runId`` is ``null`` for a persisted or discarded message)."""
    out: dict[str, Any] = {"accepted": True, "runId": reply.get("run_id"), "action": reply.get("action")}
    if reply.get("signal") is not None:
        out["signal"] = reply["signal"]
    return out


def generate_shape(result: Mapping[str, Any]) -> dict[str, Any]:
    """Mastra's ``generate`` answer from Threadline's ``result`` reply: ``{text, usage,
    finishReason, steps, runId, toolCalls, toolResults, object?, tripwire?, error?}``."""
    steps = list(result.get("steps") or [])
    out: dict[str, Any] = {
        "text": result.get("text", ""), "usage": result.get("usage") or {}, "totalUsage": result.get("usage") or {},
        "finishReason": result.get("finish_reason"), "steps": steps, "runId": result.get("run_id"),
        "toolCalls": [c for s in steps for c in (s.get("toolCalls") or [])],
        "toolResults": [r for s in steps for r in (s.get("toolResults") or [])]}
    for key in ("object", "tripwire", "error"):
        if result.get(key) is not None:
            out[key] = result[key]
    return out


# --- memory -------------------------------------------------------------------------------------
def _iso(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


def thread_shape(row: Mapping[str, Any], resource_id: str) -> dict[str, Any]:
    """Mastra's ``StorageThreadType`` of a thread row: ``{id, title, resourceId, createdAt,
    updatedAt, metadata}``."""
    return {"id": row["id"], "title": row.get("title") or "", "resourceId": resource_id,
            "createdAt": _iso(row["created_at"]), "updatedAt": _iso(row["updated_at"]),
            "metadata": row.get("metadata") or {}}


def message_shape(row: Mapping[str, Any], *, thread_id: str, resource_id: str) -> dict[str, Any]:
    """Mastra's stored message (``MastraDBMessage``) of a message row: ``{id, role, createdAt,
    threadId, resourceId, type, content}`` (``content`` is already Mastra's ``{format: 2, parts}``).

    ``createdAt`` is when the message was sent for a message that came as a signal (its
    ``content.metadata.signal.createdAt``, as Mastra stamps a user message when it receives it),
    else when it was stored: a run stores its user message with its answer, at the same instant,
    and a client that orders by ``createdAt`` (Mastra Studio) would put the answer first."""
    content = row["content"]
    signal = ((content.get("metadata") or {}).get("signal") or {}) if isinstance(content, dict) else {}
    sent = signal.get("createdAt") if isinstance(signal, dict) else None
    return {"id": row["id"], "role": row["role"], "createdAt": sent if isinstance(sent, str) and sent
            else _iso(row["created_at"]), "threadId": thread_id, "resourceId": resource_id,
            "type": row.get("type") or "v2", "content": content}


ANSWER_ROLES = frozenset({"assistant", "tool"})
"""The roles of a run's answer (what :func:`settled_messages` holds back while the run runs)."""


def settled_messages(rows: Sequence[Mapping[str, Any]], running_run_id: str | None) -> list[Mapping[str, Any]]:
    """The message ``rows`` (``{id, run_id, role, …}``) as Mastra's memory holds them while the
    thread's run ``running_run_id`` (``None``: the thread is idle) still runs: that run's answer —
    its ``assistant`` and ``tool`` rows, which Threadline stores step by step — is left out until the
    run ends, as Mastra saves a run's answer when it ends (decision 150). Its user message stays.

    The stored answer carries the ``messageId`` the run streams under; Mastra Studio merges a
    refetched message into the conversation it streams by that id, so a half-made answer served
    mid-run is put where the stored one sits and the rest of the stream goes to another message."""
    if running_run_id is None:
        return list(rows)
    return [r for r in rows if r.get("run_id") != running_run_id or r.get("role") not in ANSWER_ROLES]


@dataclass(frozen=True)
class Page:
    """A page request: ``page`` (from 0), ``per_page`` (``None``: every row, up to
    :data:`MAX_PER_PAGE`), ``field`` and ``descending`` of the order."""

    page: int
    per_page: int | None
    field: str = "createdAt"
    descending: bool = False

    @property
    def offset(self) -> int:
        return self.page * (self.per_page or 0)

    @property
    def limit(self) -> int:
        return self.per_page or MAX_PER_PAGE

    def answer(self, total: int, rows: list[Any]) -> dict[str, Any]:
        """``{total, page, perPage, hasMore}`` of this page holding ``rows``."""
        return {"total": total, "page": self.page, "perPage": self.per_page if self.per_page is not None else False,
                "hasMore": self.offset + len(rows) < total}


def page_of(query: Mapping[str, str], *, per_page: int, descending: bool, fields: tuple[str, ...]) -> Page:
    """The :class:`Page` of a query string (``page``, ``perPage`` — ``false`` for all —,
    ``orderBy[field]``, ``orderBy[direction]`` or ``orderBy`` as JSON).

    Raises:
        ShapeError: a value that is not a count, an unknown field or direction.
    """
    try:
        page = int(query.get("page", "0"))
        raw = query.get("perPage")
        size: int | None = per_page if raw is None else None if raw == "false" else int(raw)
    except ValueError:
        raise ShapeError("page and perPage must be whole numbers (perPage may be false)") from None
    order = json_object(query.get("orderBy"), "orderBy") or {}
    field = query.get("orderBy[field]", order.get("field", "createdAt"))
    direction = query.get("orderBy[direction]", order.get("direction", "DESC" if descending else "ASC"))
    if page < 0 or (size is not None and not 0 < size <= MAX_PER_PAGE):
        raise ShapeError(f"page must be >= 0 and perPage between 1 and {MAX_PER_PAGE}")
    if field not in fields or direction not in ("ASC", "DESC"):
        raise ShapeError(f"orderBy.field must be one of {', '.join(fields)} and orderBy.direction ASC or DESC")
    return Page(page, size, field, direction == "DESC")


def json_object(raw: str | None, name: str) -> dict[str, Any] | None:
    """A query parameter holding a JSON object (``None`` when absent). Raises :class:`ShapeError`
    for anything else."""
    if not raw:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise ShapeError(f"{name} must be a JSON object")
    return value


def memory_config(memory: Mapping[str, Any] | None) -> dict[str, Any]:
    """Mastra's ``GET /memory/config`` answer from an agent's published memory settings
    (``{last_messages, …}``): ``lastMessages`` as Threadline honours it; semantic recall, working
    and observational memory answer as when they are off."""
    last = (memory or {}).get("last_messages", (memory or {}).get("lastMessages"))
    return {"config": {"lastMessages": last if isinstance(last, int) and not isinstance(last, bool) else False,
                       "semanticRecall": False, "workingMemory": {"enabled": False},
                       "observationalMemory": {"enabled": False}}}

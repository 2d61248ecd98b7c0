"""The read model's rows: what the store's queries answer, the gateway serves as JSON and the
client's reads return (threads, messages, runs, agents, scores, inbox records).

Plain dicts at run time (``TypedDict``). Rows the store reads carry their times as ``datetime``
(UTC); the gateway and the client answer them as ISO-8601 text: the rows generic in
:data:`When` say which (``ThreadSummary[datetime]`` in the store, ``ThreadSummary[str]`` at the
edges). JSON columns decode to :data:`~threadline.events.json_types.JSONValue`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Generic, NotRequired, TypedDict, TypeVar

from threadline.events.json_types import JSONObject, JSONValue

When = TypeVar("When", datetime, str)
"""A row's time: ``datetime`` as read from PostgreSQL, ``str`` (ISO-8601) as served."""


class AgentSummary(TypedDict):
    """One agent the cluster serves (``GET /v1/agents``)."""

    id: str
    name: str
    description: str | None


class AgentDetails(AgentSummary):
    """What ingress published of one agent. ``metadata`` is ``{}`` and ``dynamic_metadata`` true
    when the agent's metadata is a function of the request context; ``voice`` is ``{speak_model,
    listen_model, speaker, response_format}`` or ``None``."""

    metadata: JSONObject
    dynamic_metadata: bool
    memory: JSONObject
    voice: JSONObject | None


class ThreadSummary(TypedDict, Generic[When]):
    """One thread of a resource's listing."""

    id: str
    title: str | None
    metadata: JSONObject
    created_at: When
    updated_at: When


class ThreadDetails(TypedDict):
    """One thread with its resource; times as ISO-8601 text."""

    id: str
    resource_id: str
    title: str | None
    metadata: JSONObject
    created_at: str
    updated_at: str


class StoredContent(TypedDict):
    """Mastra's stored message content (``MastraMessageContentV2``): ``format`` 2 and the message's
    ``parts`` (``{type: "text", text}``, ``{type: "tool-invocation", toolInvocation}``, ``data-*``,
    …), with ``content`` (its text), ``metadata`` and the provider's fields when present."""

    format: int
    parts: list[JSONObject]
    content: NotRequired[str]
    metadata: NotRequired[JSONObject]
    providerMetadata: NotRequired[JSONObject]


class MessageRow(TypedDict, Generic[When]):
    """One stored message of a thread (Mastra's ``MastraDBMessage``)."""

    id: str
    run_id: str | None
    role: str
    type: str | None
    content: StoredContent
    created_at: When


class RunRow(TypedDict, Generic[When]):
    """One run of a thread. ``usage``, ``error`` and ``tripwire`` are decoded JSON or ``None``;
    ``finished_at`` is ``None`` while the run runs."""

    run_id: str
    agent_id: str
    kind: str
    status: str
    step: int
    steps_done: int
    finish_reason: str | None
    text: str | None
    usage: JSONObject | None
    error: JSONObject | None
    tripwire: JSONObject | None
    created_at: When
    finished_at: When | None


class ScoreRow(TypedDict):
    """One stored score of a finished run (``status``: ``done`` or ``failed``); ``scored_at`` ISO text."""

    run_id: str
    scorer: str
    agent_id: str
    status: str
    score: float | None
    reason: str | None
    error: JSONObject | None
    scored_at: str | None


class InboxRecord(TypedDict):
    """One notification record of a thread's inbox; times as ISO-8601 text (``None`` when unset).
    ``payload`` and ``metadata`` come only when one record is read."""

    id: str
    source: str
    kind: str
    priority: str
    status: str
    summary: str
    coalesced_count: int
    coalesce_key: str | None
    dedupe_key: str | None
    attributes: JSONObject
    delivery_reason: str | None
    delivery_attempts: int
    last_delivery_error: str | None
    summarized: bool
    held: bool
    deliver_at: str | None
    summary_at: str | None
    created_at: str
    updated_at: str
    delivered_at: str | None
    seen_at: str | None
    dismissed_at: str | None
    archived_at: str | None
    payload: NotRequired[JSONValue]
    metadata: NotRequired[JSONObject]


__all__ = ["AgentDetails", "AgentSummary", "InboxRecord", "MessageRow", "RunRow", "ScoreRow", "StoredContent",
           "ThreadDetails", "ThreadSummary", "When"]

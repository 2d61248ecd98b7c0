"""Requests users publish to the ingress topic (keyed by thread key).

Mastra's thread signals ``sendMessage`` / ``queueMessage`` and its ``generate`` / ``stream``
with ``memory: {resource, thread}`` (docs/signals.md). Every request names its thread by ``resource_id`` and
``thread_id`` (docs/decisions.md §16) and may name a ``reply_to`` topic for its replies.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from threadline.events.base import Event
from threadline.events.options import check_options

_ID_MAX = 256


class MessageObject(BaseModel):
    """``{contents, attributes, metadata, provider_options}`` form of a message (Mastra's ``sendMessage``;
    Mastra's ``providerOptions`` spelling accepted)."""

    model_config = ConfigDict(extra="forbid")
    contents: str | list[dict[str, Any]]
    attributes: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    provider_options: dict[str, Any] | None = Field(
        default=None, validation_alias=AliasChoices("provider_options", "providerOptions"))


MessageInput = str | list[dict[str, Any]] | MessageObject
"""A user message: a string, a list of text/file parts, or a :class:`MessageObject`."""


class IfActive(BaseModel):
    """What to do when the thread has an active run (default: deliver into it)."""

    model_config = ConfigDict(extra="forbid")
    behavior: Literal["deliver", "persist", "discard"] = "deliver"
    attributes: dict[str, str | int | float | bool] = Field(default_factory=dict)


class IfIdle(BaseModel):
    """What to do when the thread is idle (default: wake a run with the message)."""

    model_config = ConfigDict(extra="forbid")
    behavior: Literal["wake", "persist", "discard"] = "wake"
    attributes: dict[str, str | int | float | bool] = Field(default_factory=dict)
    stream_options: dict[str, Any] = Field(default_factory=dict)
    """Options of the run a wake starts (e.g. ``{"max_steps": 3}``); an unknown name is refused
    (:func:`threadline.events.options.check_options`)."""

    @field_validator("stream_options")
    @classmethod
    def _known_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_options(value)


class _ThreadRequest(Event):
    agent_id: str = Field(min_length=1, max_length=_ID_MAX)
    """Id of the agent (as defined in the agents module)."""
    resource_id: str = Field(min_length=1, max_length=_ID_MAX)
    """Owner of the thread (Mastra's ``resourceId``)."""
    thread_id: str = Field(min_length=1, max_length=_ID_MAX)
    """The conversation (Mastra's ``threadId``)."""
    reply_to: str | None = Field(default=None, max_length=249)
    """Topic for the replies to this request (default: the cluster's replies topic)."""

    @field_validator("reply_to")
    @classmethod
    def _topic_name(cls, value: str | None) -> str | None:
        if value is not None and not all(c.isascii() and (c.isalnum() or c in "._-") for c in value):
            raise ValueError("reply_to must be a Kafka topic name ([a-zA-Z0-9._-])")
        return value


SIGNAL_ID_PATTERN = r"^sig_[0-9a-f]{26}$"
"""The form of a signal id (``threadline.ids.new_id("sig")``)."""


class _CreatesSignal(_ThreadRequest):
    """Requests whose input is stored as a new signal (the ``signal`` of Mastra's send result)."""

    signal_id: str | None = Field(default=None, pattern=SIGNAL_ID_PATTERN)
    """Id for the signal the request creates, chosen by the client so the send result can name it at
    once (``None``: ingress picks one). A duplicate of an existing signal's id is refused
    (``signal_id_taken``)."""


class _Targeted(_CreatesSignal):
    """Requests that go into an active run or act on an idle thread (``ifActive`` / ``ifIdle``)."""

    run_id: str | None = None
    """Target this run directly (it must be the thread's active run)."""
    if_active: IfActive = Field(default_factory=IfActive)
    if_idle: IfIdle = Field(default_factory=IfIdle)


class SendMessage(_Targeted):
    """``sendMessage(message, options)``: deliver into the active run, or wake the idle thread."""

    type: Literal["send_message"] = "send_message"
    message: MessageInput


class QueueMessage(_CreatesSignal):
    """``queueMessage(message, options)``: the next turn after the active run, or a run now."""

    type: Literal["queue_message"] = "queue_message"
    message: MessageInput
    if_idle: IfIdle = Field(default_factory=IfIdle)


class Stream(_CreatesSignal):
    """``agent.stream(message, {memory: {resource, thread}, ...options})``."""

    type: Literal["stream"] = "stream"
    message: MessageInput
    options: dict[str, Any] = Field(default_factory=dict)
    """Execution options, e.g. ``max_steps``, ``max_processor_retries``; an unknown name is
    refused (:func:`threadline.events.options.check_options`)."""
    thread: dict[str, Any] | None = None
    """``{title, metadata}`` to create or update the thread row (Mastra's ``memory.thread`` object)."""


    @field_validator("options")
    @classmethod
    def _known_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_options(value)


class Generate(Stream):
    """``agent.generate(...)``: like ``stream``; the run's result is also sent as a reply."""

    type: Literal["generate"] = "generate"  # type: ignore[assignment]  # narrows the parent's Literal on purpose


class SignalInput(BaseModel):
    """A signal (Mastra's ``sendSignal``): ``type`` is the semantic category, ``tag_name`` the XML tag
    the model sees (``{type: "notification", tag_name: "github-review"}`` → ``<github-review>``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: str
    """``user``, ``state``, ``reactive``, ``notification`` (legacy ``user-message`` and
    ``system-reminder`` are normalised; anything else is rejected)."""
    contents: str | list[dict[str, Any]] = ""
    tag_name: str | None = Field(default=None, alias="tagName")
    attributes: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    provider_options: dict[str, Any] | None = Field(default=None, alias="providerOptions")


class SendSignal(_Targeted):
    """``sendSignal(signal, options)``: system-generated context for the thread."""

    type: Literal["send_signal"] = "send_signal"
    signal: SignalInput


class StateInput(BaseModel):
    """A state signal (Mastra's ``sendStateSignal``): the current value of a named lane."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    id: str = Field(min_length=1, max_length=_ID_MAX)
    """The lane, e.g. ``browser`` or ``editor``."""
    cache_key: str = Field(alias="cacheKey", min_length=1)
    """Producer-owned key: the same key and mode as the lane's current value is skipped."""
    contents: str | list[dict[str, Any]] = ""
    mode: Literal["snapshot", "delta"] = "snapshot"
    value: Any = None
    delta: Any = None
    attributes: dict[str, str | int | float | bool] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    tag_name: str | None = Field(default=None, alias="tagName")
    transient: bool | None = None

    @field_validator("transient")
    @classmethod
    def _not_transient(cls, value: bool | None) -> bool | None:
        if value:
            raise ValueError("state signals cannot be transient")
        return value


class SendStateSignal(_Targeted):
    """``sendStateSignal(state, options)``."""

    type: Literal["send_state_signal"] = "send_state_signal"
    state: StateInput


class NotificationInput(BaseModel):
    """One notification (Mastra's ``sendNotificationSignal``): ``summary`` is what the model sees,
    ``payload`` is stored for tools and applications and never shown to the model."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    source: str = Field(min_length=1, max_length=_ID_MAX)
    kind: str = Field(min_length=1, max_length=_ID_MAX)
    summary: str
    priority: Literal["low", "medium", "high", "urgent"] = "medium"
    payload: Any = None
    dedupe_key: str | None = Field(default=None, alias="dedupeKey")
    coalesce_key: str | None = Field(default=None, alias="coalesceKey")
    attributes: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


class SendNotificationSignal(_ThreadRequest):
    """``sendNotificationSignal(notification | [notifications], options)``: create or merge inbox
    records and apply the delivery policy. Answered with a ``notified`` reply."""

    type: Literal["send_notification_signal"] = "send_notification_signal"
    notifications: list[NotificationInput] = Field(min_length=1, max_length=100)
    if_idle: IfIdle = Field(default_factory=IfIdle)


class AbortRequest(_ThreadRequest):
    """Abort the thread's active run (Mastra's ``subscription.abort()``); what is queued behind it
    still runs. Answered with an ``aborted`` reply (``aborted: false`` when nothing was running)."""

    type: Literal["abort"] = "abort"
    run_id: str | None = None
    """Abort only this run (default: whatever run is active)."""


class ToolApprovalRequest(_ThreadRequest):
    """Approve or decline a tool call the run ``run_id`` waits on (Mastra's ``approveToolCall`` /
    ``declineToolCall``). Answered with a ``resolved`` reply."""

    type: Literal["tool_approval"] = "tool_approval"
    run_id: str = Field(min_length=1, max_length=_ID_MAX)
    tool_call_id: str = Field(min_length=1, max_length=_ID_MAX)
    approved: bool
    reason: str | None = Field(default=None, max_length=10_000)
    """A decline's reason, what the model reads (blank: Mastra's default)."""


IngressRequest = Annotated[
    SendMessage | QueueMessage | SendSignal | SendStateSignal | SendNotificationSignal | Stream | Generate
    | AbortRequest | ToolApprovalRequest,
    Field(discriminator="type"),
]
"""Every request the ingress topic accepts, tagged by ``type``."""

INGRESS_ADAPTER: TypeAdapter[IngressRequest] = TypeAdapter(IngressRequest)

"""The shapes of the messages a run holds and sends, as types (no behaviour).

Three families, all plain dicts at run time (these ``TypedDict`` s only let mypy check who builds
and who reads them):

- the stored message, Mastra's ``MastraDBMessage`` (format 2): :class:`DBMessage`, its
  :class:`MessageContent` and its parts (:data:`MessagePart`: ``text``, ``reasoning``,
  ``tool-invocation``, ``file``, ``step-start``, ``data-*``). Inside a run the
  :class:`~threadline.runtime.messages.MessageList` holds them as
  :class:`~threadline._internal.attrdict.AttrDict` s of this shape, so processors may read
  ``msg.content.parts``;
- the model-facing (OpenAI chat, as litellm takes it) messages: :data:`CoreMessage`, with
  :class:`CoreToolCall`, and the tool definitions sent beside them (:class:`ToolSpec`);
- the run's step summaries (:class:`StepSummary`, ``RunState.steps``) and the model output a
  step records before its tools run (:class:`RecordedOutput`).

Values a user passes through untouched (tool arguments and results, metadata, provider
options) are :data:`~threadline.events.json_types.JSONValue`.
"""

# No ``from __future__ import annotations``: the TypedDicts need their annotations evaluated for
# ``NotRequired`` to show in ``__required_keys__`` on Python 3.11 (as events/chunk_types.py).

from typing import Literal, NotRequired, TypeAlias, TypedDict

from threadline.events.chunk_types import ToolCallPayload, Usage
from threadline.events.json_types import JSONObject, JSONValue

Role = Literal["user", "assistant", "system", "signal", "tool"]
"""A stored message's role; ``signal`` is a signal delivered into the thread (shown to the model
as a user message)."""

ToolState = Literal["partial-call", "call", "result", "output-error", "output-denied"]
"""Where a tool invocation stands: called (``call``), answered (``result``), failed
(``output-error``) or declined by a person (``output-denied``, decision 226)."""


# --- the stored message (MastraDBMessage, format 2)

class TextPart(TypedDict):
    type: Literal["text"]
    text: str
    createdAt: NotRequired[int]
    """When it was stored, in milliseconds since the epoch (as Mastra stamps parts)."""


class ReasoningDetail(TypedDict):
    type: str
    """``text`` (or a provider's ``redacted``)."""
    text: NotRequired[str]


class ReasoningPart(TypedDict):
    type: Literal["reasoning"]
    reasoning: str
    details: list[ReasoningDetail]
    createdAt: NotRequired[int]
    """When it was stored, in milliseconds since the epoch (as Mastra stamps parts)."""


class ToolInvocation(TypedDict):
    state: ToolState
    toolCallId: str
    toolName: str
    args: JSONValue
    result: NotRequired[JSONValue]
    """Set in state ``result``."""
    errorText: NotRequired[str]
    """Set in state ``output-error``."""
    approval: NotRequired[JSONObject]
    """A call held for approval, once answered: ``{id, approved, reason?}`` (Mastra's)."""


class ToolInvocationPart(TypedDict):
    type: Literal["tool-invocation"]
    toolInvocation: ToolInvocation


class FilePart(TypedDict):
    type: Literal["file"]
    mimeType: str
    """The media type (``image/png``…)."""
    data: str
    """Base64 data or a URL."""
    filename: NotRequired[str]
    createdAt: NotRequired[int]
    """When it was stored, in milliseconds since the epoch (as Mastra stamps parts)."""


class StepStartPart(TypedDict):
    """Marks where a later step of the run began (a new model turn inside one assistant message;
    the message's first step has none, as in Mastra)."""

    type: Literal["step-start"]
    model: NotRequired[str]
    """``<provider>/<modelId>`` (``openai.chat/gpt-4o``)."""
    createdAt: NotRequired[int]
    """When it was stored, in milliseconds since the epoch (as Mastra stamps parts)."""


class DataPart(TypedDict):
    """A custom ``data-<name>`` part (``writer.custom`` in a tool or processor)."""

    type: str
    """``data-<name>``."""
    data: JSONValue
    id: NotRequired[str]
    createdAt: NotRequired[int]
    """When it was stored, in milliseconds since the epoch (as Mastra stamps parts)."""


MessagePart: TypeAlias = TextPart | ReasoningPart | ToolInvocationPart | FilePart | StepStartPart | DataPart
"""One part of a stored message (discriminated by ``type``; ``data-*`` for :class:`DataPart`)."""


class MessageContent(TypedDict):
    format: Literal[2]
    parts: list[MessagePart]
    content: NotRequired[str]
    """The text of its ``text`` parts, on user (not signal) and assistant messages with text, as
    Mastra stores it (or the legacy plain text of a message stored without parts)."""
    metadata: NotRequired[JSONObject]
    """The message's metadata: a signal's ``{signal: {...}}``, an assistant message's ``modelId``
    and ``provider`` (``openai.chat``)."""
    providerMetadata: NotRequired[JSONObject]
    """The ``providerOptions`` the message or signal was sent with."""


class DBMessage(TypedDict):
    """Mastra's ``MastraDBMessage``: a message as a thread stores it."""

    id: str
    role: Role
    createdAt: str
    """ISO 8601, UTC, ``Z`` suffix."""
    content: MessageContent
    threadId: NotRequired[str]
    resourceId: NotRequired[str]
    type: NotRequired[str]
    """``v2`` or a signal's kind (absent on most messages)."""


class UIMessage(TypedDict):
    """A message in Mastra's UI format (``MessageList.get.all.ui()``)."""

    id: str
    role: str
    parts: list[MessagePart]
    metadata: NotRequired[JSONObject]


# --- the model-facing messages (OpenAI chat, as litellm takes them)

class CoreFunctionCall(TypedDict):
    name: str
    arguments: str
    """The arguments as a JSON string."""


class CoreToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: CoreFunctionCall


class CoreSystemMessage(TypedDict):
    role: Literal["system"]
    content: str
    providerOptions: NotRequired[JSONObject]
    """Mastra's per-provider options of the message (``anthropic.cacheControl``…), turned into
    the provider's fields by :mod:`threadline.runtime.model.provider_options`."""


class CoreUserMessage(TypedDict):
    role: Literal["user"]
    content: str | list[JSONObject]
    """The text, or content blocks (the text first, then one block per file)."""
    providerOptions: NotRequired[JSONObject]


class CoreAssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: str | None
    tool_calls: NotRequired[list[CoreToolCall]]


class CoreToolMessage(TypedDict):
    role: Literal["tool"]
    tool_call_id: str
    content: str
    """The result (or ``{"error": ...}``) as a JSON string."""


CoreMessage: TypeAlias = CoreSystemMessage | CoreUserMessage | CoreAssistantMessage | CoreToolMessage
"""One message of a model request (discriminated by ``role``)."""


class FunctionSpec(TypedDict):
    name: str
    description: str
    parameters: JSONObject
    """The arguments' JSON Schema."""


class ToolSpec(TypedDict):
    """A tool as the model is told of it (OpenAI's function tool)."""

    type: Literal["function"]
    function: FunctionSpec


# --- a run's steps

class ToolOutcome(TypedDict):
    """A tool call's outcome in a step summary: ``result`` or ``error``."""

    toolCallId: str
    toolName: str
    result: NotRequired[JSONValue]
    error: NotRequired[str]


class StepSummary(TypedDict, total=False):
    """One finished step (``RunState.steps``, what processors get as ``steps``): every key but
    ``object`` is always set (total=False only so the step can add ``object`` when it has one)."""

    stepNumber: int
    text: str
    toolCalls: list[ToolCallPayload]
    toolResults: list[ToolOutcome]
    finishReason: str
    usage: Usage | None
    object: JSONValue
    """The structured answer, when one was asked for and given."""


class RecordedOutput(TypedDict):
    """The model output of an attempt, recorded before its tools ran (replayed by a
    re-execution instead of asking the model again)."""

    chunks: list[JSONObject]
    """The chunks ``{type, payload}`` as the model streamed them."""
    usage: NotRequired[Usage | None]
    finish_reason: NotRequired[str]


__all__ = [
    "CoreAssistantMessage", "CoreFunctionCall", "CoreMessage", "CoreSystemMessage", "CoreToolCall",
    "CoreToolMessage", "CoreUserMessage", "DBMessage", "DataPart", "FilePart", "FunctionSpec",
    "MessageContent", "MessagePart", "ReasoningDetail", "ReasoningPart",
    "RecordedOutput", "Role", "StepStartPart", "StepSummary",
    "TextPart", "ToolInvocation", "ToolInvocationPart", "ToolOutcome", "ToolSpec", "ToolState", "UIMessage",
]

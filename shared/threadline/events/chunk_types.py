"""The chunk bodies of the per-thread stream as types: one ``TypedDict`` per chunk kind.

Chunks stay plain dicts at run time (workers encode them with orjson as they are); these types
only let mypy check who builds and who reads them. Each kind has ``type: Literal[...]`` (Mastra's
names, collected in :class:`ChunkKind`) and a typed ``payload``; :data:`ChunkBody` is their union,
discriminated by ``type``. The envelope fields (``runId``, ``step``, ``attempt``, ``seq``, stamped
by :func:`threadline.events.chunks.envelope`), ``from`` and ``transient`` are optional on every
body: a builder's body lacks the stamp, a subscriber's chunk has it.

Kinds Threadline does not know (a user's ``data-*`` chunk, a newer Mastra kind) are
:class:`OtherChunk`: :func:`parse_chunk` keeps them, never refuses them. Narrow a body to a known kind with
:func:`known`, then by ``type``: ``k = known(chunk)``; ``if k and k["type"] == ChunkKind.FINISH:``.
"""

# No ``from __future__ import annotations``: the TypedDicts need their annotations evaluated for
# ``NotRequired`` to show in ``__required_keys__`` on Python 3.11.

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, NotRequired, TypeAlias, TypedDict, cast

import orjson

JsonValue: TypeAlias = str | int | float | bool | Sequence["JsonValue"] | Mapping[str, "JsonValue"] | None
"""Any value JSON can carry (read-only views: a ``dict[str, int]`` is one too)."""
JsonObject: TypeAlias = Mapping[str, JsonValue]
"""A JSON object (read-only view) (tool arguments, usage, errors, ``data`` of a ``data-*`` chunk)."""


class ChunkKind:
    """The chunk ``type`` names Threadline writes or reads, as constants: compare against these,
    not against bare strings (``chunk["type"] == ChunkKind.FINISH``)."""

    START: Final = "start"
    STEP_START: Final = "step-start"
    TEXT_START: Final = "text-start"
    TEXT_DELTA: Final = "text-delta"
    TEXT_END: Final = "text-end"
    REASONING_START: Final = "reasoning-start"
    REASONING_DELTA: Final = "reasoning-delta"
    REASONING_END: Final = "reasoning-end"
    TOOL_CALL_INPUT_STREAMING_START: Final = "tool-call-input-streaming-start"
    TOOL_CALL_DELTA: Final = "tool-call-delta"
    TOOL_CALL_INPUT_STREAMING_END: Final = "tool-call-input-streaming-end"
    TOOL_CALL: Final = "tool-call"
    TOOL_RESULT: Final = "tool-result"
    TOOL_ERROR: Final = "tool-error"
    TOOL_OUTPUT: Final = "tool-output"
    STEP_FINISH: Final = "step-finish"
    FINISH: Final = "finish"
    OBJECT: Final = "object"
    OBJECT_RESULT: Final = "object-result"
    ERROR: Final = "error"
    TRIPWIRE: Final = "tripwire"
    ABORT: Final = "abort"
    ATTEMPT_DISCARDED: Final = "attempt-discarded"
    DATA_USER_MESSAGE: Final = "data-user-message"
    DATA_SIGNAL: Final = "data-signal"
    DATA_PREFIX: Final = "data-"
    """Prefix of every custom data chunk (``writer.custom``, workflow progress, the echoes)."""


ECHO_KINDS: Final = frozenset({ChunkKind.DATA_USER_MESSAGE, ChunkKind.DATA_SIGNAL})
"""The stream echoes of delivered signals (a subscriber may hide them)."""


def is_data_kind(kind: str) -> bool:
    """True for a ``data-*`` chunk kind (custom data, echoes, workflow progress)."""
    return kind.startswith(ChunkKind.DATA_PREFIX)


_Envelope = TypedDict("_Envelope", {
    "runId": NotRequired[str],
    "step": NotRequired[int],
    "attempt": NotRequired[int],
    "seq": NotRequired[int],
    "from": NotRequired[str],
    "transient": NotRequired[bool],
})
"""The fields every chunk may carry besides ``type`` and its body: the stamp (``runId``, ``step``,
``attempt``, ``seq``: absent until :func:`~threadline.events.chunks.envelope`), ``from``
(``"AGENT"`` for a run's chunks) and ``transient`` (not stored in the thread's messages)."""


# --- payloads

class StartPayload(TypedDict):
    id: str
    """The agent's id."""
    messageId: str


class StepStartPayload(TypedDict):
    messageId: str
    warnings: list[JsonValue]
    """The provider's call warnings (Mastra's); none that Threadline knows of: ``[]``."""
    startedAt: NotRequired[int]
    """Milliseconds since the epoch; absent on a replayed (cached) response."""


class PartPayload(TypedDict):
    """``text-start`` / ``text-end`` / ``reasoning-start`` / ``reasoning-end``: ``id`` is Mastra's
    (``txt-0``, ``reasoning-0``); ``text-end`` repeats its ``type``, as Mastra's does."""

    id: str
    providerMetadata: NotRequired[dict[str, Any]]
    """On ``reasoning-end`` of an Anthropic thinking block: ``{anthropic: {signature}}``."""
    type: NotRequired[str]


class DeltaPayload(TypedDict):
    """``text-delta`` / ``reasoning-delta``."""

    id: str
    text: str


class ToolInputStartPayload(TypedDict):
    toolCallId: str
    toolName: str


class ToolCallDeltaPayload(TypedDict):
    toolCallId: str
    argsTextDelta: str
    toolName: str


class ToolInputEndPayload(TypedDict):
    toolCallId: str


class ToolCallPayload(TypedDict):
    toolCallId: str
    toolName: str
    args: JsonValue


class ToolResultPayload(TypedDict):
    toolCallId: str
    toolName: str
    args: JsonValue
    result: JsonValue
    providerMetadata: NotRequired[JsonObject]
    """A sub-agent call's ``{mastra: {modelOutput: {type: "text", value}}}`` (what the model reads)."""


class ToolError(TypedDict):
    """A tool's error as Mastra's ``tool-error`` carries it."""

    name: str
    """``ToolNotFoundError`` for a call to a tool the agent does not have, else ``Error``."""
    message: str
    """The error's text (what the model is told)."""


class ToolErrorPayload(TypedDict):
    toolCallId: str
    toolName: str
    args: JsonValue
    error: ToolError


class StepResult(TypedDict):
    reason: str | None
    """The step's finish reason; ``retry`` on an attempt a processor rejected (it is retried)."""
    rawReason: NotRequired[str]
    """The provider's own finish reason (``tool_calls``), where one came."""
    isContinued: NotRequired[bool]
    retryProcessorId: NotRequired[str | None]
    """On a ``retry``: the processor that asked for it."""
    retryReason: NotRequired[str]
    """On a ``retry``: the processor's reason."""
    retryMetadata: NotRequired[JsonValue]
    """On a ``retry``: the processor's ``abort(..., metadata=...)``."""


class Usage(TypedDict, total=False):
    """Mastra's token usage: ``{inputTokens, outputTokens, totalTokens}`` (integers), with
    ``cachedInputTokens`` / ``reasoningTokens`` when the provider reported them (non-zero); a run's
    sum over its steps has ``partial: True`` when a step reported none."""

    inputTokens: int
    outputTokens: int
    totalTokens: int
    cachedInputTokens: int
    reasoningTokens: int
    partial: bool


class UsageParts(TypedDict):
    total: int
    noCache: NotRequired[int]
    cacheRead: NotRequired[int]
    text: NotRequired[int]
    reasoning: NotRequired[int]


class RawUsage(TypedDict):
    """Mastra's ``usage.raw``: the counts split, and the provider's report as it came."""

    inputTokens: UsageParts
    """``{total, noCache, cacheRead}``."""
    outputTokens: UsageParts
    """``{total, text, reasoning}``."""
    raw: JsonObject


class MastraUsage(Usage, total=False):
    """:class:`Usage` as a chunk carries it: ``reasoningTokens`` and ``cachedInputTokens`` always
    (0 when not reported) and ``raw`` when the provider reported usage."""

    raw: RawUsage


class StepOutput(TypedDict):
    text: NotRequired[str | None]
    toolCalls: NotRequired[list[ToolCallPayload]]
    """The step's tool calls ``{toolCallId, toolName, args}`` (``[]``: none)."""
    usage: MastraUsage | Usage | None
    """``{inputTokens, outputTokens, totalTokens, ...}`` (token counts)."""


class ModelMetadata(TypedDict):
    modelId: str
    """``gpt-4o`` of ``openai/gpt-4o``."""
    modelVersion: str
    """``v3``: the model interface whose stream shapes the chunks follow."""
    modelProvider: str
    """``openai.chat``: the provider, through its chat completions API."""


class ProviderResponse(TypedDict, total=False):
    """What the provider said of one answer (all optional: a cached or replayed answer has none)."""

    id: str
    """The provider's response id (``chatcmpl-…``)."""
    timestamp: str
    """When the provider made it, ISO 8601 UTC (``2026-01-01T00:00:00.000Z``)."""
    modelId: str
    """The model the provider says answered."""
    headers: dict[str, str]
    """Its HTTP response headers."""
    rawUsage: JsonObject
    """Its usage report as it came."""


class StepMetadata(TypedDict):
    """Mastra's ``metadata`` of a ``step-finish`` (and of a ``finish``)."""

    providerMetadata: dict[str, JsonObject]
    """``{<provider>: {}}``: the provider's own metadata (none that Threadline reads)."""
    modelId: str
    modelMetadata: ModelMetadata
    id: NotRequired[str]
    timestamp: NotRequired[str]
    headers: NotRequired[dict[str, str]]


class StepFinishPayload(TypedDict):
    messageId: str
    stepResult: StepResult
    output: StepOutput
    processorRetryCount: NotRequired[int]
    """Mastra's: on a ``retry``, the run's processor retries with this one (1 for the first);
    0 on a step that was not rejected."""
    processorRetryFeedback: NotRequired[str]
    """On a ``retry`` a processor's ``abort`` asked for: the feedback the retried request carries
    (``[Processor Feedback] Your previous response was not accepted: <reason>. …``)."""
    metadata: NotRequired[StepMetadata]


class FinishPayload(TypedDict):
    stepResult: StepResult
    finishReason: str
    """Threadline's: the run's finish reason (``stepResult.reason`` of its last step)."""
    output: NotRequired[StepOutput]
    tripwire: NotRequired[JsonObject]
    messageId: NotRequired[str]
    metadata: NotRequired[StepMetadata]
    processorRetryCount: NotRequired[int]
    """The last step's: 0, as Mastra's (a run's last step is never a rejected one)."""
    response: NotRequired[JsonObject]
    """The last step's ``id``, ``timestamp``, ``modelId``, ``headers``, ``modelMetadata``."""
    text: NotRequired[str]
    """Threadline's: the run's result text when ``process_output_result`` changed the answer
    (Mastra's stream ``result.text``; ``output.text`` stays the step's streamed text)."""


class ErrorPayload(TypedDict):
    error: JsonObject
    """``{kind, message, ...}``."""


class AttemptDiscardedPayload(TypedDict):
    step: int
    attempt: int
    reason: str
    """``re-executed``, ``aborted``, ``failed``, ``stuck``, or a processor's retry."""
    retryProcessorId: NotRequired[str]
    retryReason: NotRequired[str]
    retryMetadata: NotRequired[JsonValue]


class ToolOutputPayload(TypedDict):
    """A child run's chunk mirrored into its parent's thread (decision 78)."""

    output: "ChunkBody"
    toolCallId: str | None
    toolName: str | None
    parentRunId: str | None


class EchoData(TypedDict):
    """``data`` of a signal's echo: its non-empty fields, always ``contents``."""

    contents: JsonValue
    id: NotRequired[str]
    type: NotRequired[str]
    tagName: NotRequired[str]
    createdAt: NotRequired[str]
    acceptedAt: NotRequired[str]
    """When ingress accepted a thread verb's signal (Mastra's ``acceptedAt``)."""
    attributes: NotRequired[JsonObject]
    metadata: NotRequired[JsonObject]


# --- chunk bodies, one per kind

class StartChunk(_Envelope):
    type: Literal["start"]
    payload: StartPayload


class StepStartChunk(_Envelope):
    type: Literal["step-start"]
    payload: StepStartPayload


class TextPartChunk(_Envelope):
    type: Literal["text-start", "text-end", "reasoning-start", "reasoning-end"]
    payload: PartPayload


class DeltaChunk(_Envelope):
    type: Literal["text-delta", "reasoning-delta"]
    payload: DeltaPayload


class ToolInputStartChunk(_Envelope):
    type: Literal["tool-call-input-streaming-start"]
    payload: ToolInputStartPayload


class ToolCallDeltaChunk(_Envelope):
    type: Literal["tool-call-delta"]
    payload: ToolCallDeltaPayload


class ToolInputEndChunk(_Envelope):
    type: Literal["tool-call-input-streaming-end"]
    payload: ToolInputEndPayload


class ToolCallChunk(_Envelope):
    type: Literal["tool-call"]
    payload: ToolCallPayload


class ToolResultChunk(_Envelope):
    type: Literal["tool-result"]
    payload: ToolResultPayload


class ToolErrorChunk(_Envelope):
    type: Literal["tool-error"]
    payload: ToolErrorPayload


class ToolOutputChunk(_Envelope):
    type: Literal["tool-output"]
    payload: ToolOutputPayload


class StepFinishChunk(_Envelope):
    type: Literal["step-finish"]
    payload: StepFinishPayload


class FinishChunk(_Envelope):
    type: Literal["finish"]
    payload: FinishPayload


class ObjectChunk(_Envelope):
    """Structured output, at the top level as in Mastra (no payload)."""

    type: Literal["object", "object-result"]
    object: JsonValue


class ErrorChunk(_Envelope):
    type: Literal["error"]
    payload: ErrorPayload


class TripwireChunk(_Envelope):
    type: Literal["tripwire"]
    payload: JsonObject
    """``{reason, retry, metadata, processorId}``: the processor's verdict."""


class AbortChunk(_Envelope):
    type: Literal["abort"]
    payload: NotRequired[JsonObject]
    """None written (Mastra's has none); an older release wrote ``{}``."""


class AttemptDiscardedChunk(_Envelope):
    type: Literal["attempt-discarded"]
    payload: AttemptDiscardedPayload


class EchoChunk(_Envelope):
    """A delivered signal's echo: ``data-user-message`` (user signals) or ``data-signal``."""

    type: Literal["data-user-message", "data-signal"]
    data: EchoData


class OtherChunk(_Envelope):
    """Any other kind: a user's ``data-*`` chunk (``data``), a workflow's progress, a kind this
    version does not know. Kept as read."""

    type: str
    payload: NotRequired[JsonValue]
    data: NotRequired[JsonValue]


KnownChunk: TypeAlias = (
    StartChunk | StepStartChunk | TextPartChunk | DeltaChunk | ToolInputStartChunk | ToolCallDeltaChunk
    | ToolInputEndChunk | ToolCallChunk | ToolResultChunk | ToolErrorChunk | ToolOutputChunk | StepFinishChunk
    | FinishChunk | ObjectChunk | ErrorChunk | TripwireChunk | AbortChunk | AttemptDiscardedChunk | EchoChunk)
"""Every kind Threadline writes, discriminated by ``type``."""
ChunkBody: TypeAlias = KnownChunk | OtherChunk
"""A chunk as a subscriber reads it: a known kind, or any other kept as is."""
Emitted: TypeAlias = ChunkBody | dict[str, Any]
"""A chunk a sink takes: a typed body from a builder, or a dict a processor or tool wrote itself
(a ``data-*`` chunk of user code, whose shape is the user's)."""


KNOWN_KINDS: Final = frozenset({
    ChunkKind.START, ChunkKind.STEP_START, ChunkKind.TEXT_START, ChunkKind.TEXT_DELTA, ChunkKind.TEXT_END,
    ChunkKind.REASONING_START, ChunkKind.REASONING_DELTA, ChunkKind.REASONING_END,
    ChunkKind.TOOL_CALL_INPUT_STREAMING_START, ChunkKind.TOOL_CALL_DELTA, ChunkKind.TOOL_CALL_INPUT_STREAMING_END,
    ChunkKind.TOOL_CALL, ChunkKind.TOOL_RESULT, ChunkKind.TOOL_ERROR, ChunkKind.TOOL_OUTPUT,
    ChunkKind.STEP_FINISH, ChunkKind.FINISH, ChunkKind.OBJECT, ChunkKind.OBJECT_RESULT, ChunkKind.ERROR,
    ChunkKind.TRIPWIRE, ChunkKind.ABORT, ChunkKind.ATTEMPT_DISCARDED, ChunkKind.DATA_USER_MESSAGE,
    ChunkKind.DATA_SIGNAL})
"""The ``type`` of every :data:`KnownChunk`."""


class ChunkParseError(ValueError):
    """A record that is not a chunk: not a JSON object, or without a string ``type``."""


def parse_chunk(raw: bytes | str | Mapping[str, object]) -> ChunkBody:
    """A chunk record's value (JSON bytes or text, or an already decoded object) as a
    :data:`ChunkBody`: the same dict, typed. Any kind is accepted (a user's ``data-*``, a kind
    this version does not know): only the shape of a chunk is checked, not each kind's payload
    (the producers are typed).

    Raises:
        ChunkParseError: not a JSON object, or ``type`` missing or not a string.
    """
    value = raw if isinstance(raw, Mapping) else _loads(raw)
    if not isinstance(value, dict):
        raise ChunkParseError(f"a chunk is a JSON object, not {type(value).__name__}")
    if not isinstance(value.get("type"), str):
        raise ChunkParseError("a chunk has a string 'type'")
    return cast(ChunkBody, value)


def _loads(raw: bytes | str) -> object:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ChunkParseError(f"a chunk is JSON: {exc}") from exc


def known(chunk: ChunkBody | Mapping[str, object]) -> KnownChunk | None:
    """``chunk`` as a :data:`KnownChunk` (narrow it further by ``type``), or ``None`` for any
    other kind (a user's ``data-*`` chunk, an unknown kind)."""
    return cast(KnownChunk, chunk) if chunk.get("type") in KNOWN_KINDS else None


def kind_of(chunk: Mapping[str, object]) -> str:
    """A chunk's ``type`` (``""`` when it has none)."""
    kind = chunk.get("type")
    return kind if isinstance(kind, str) else ""

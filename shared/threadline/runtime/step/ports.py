"""The ports of the step loop: what one step of a run reads and writes, and where its chunks
go. The loop (:mod:`threadline.runtime.step.loop`) works against these protocols only; the
processor-worker plugs in PostgreSQL (:class:`threadline.worker.step_store.PgStepStore`) and Kafka
(:class:`threadline.kafka.chunk_writer.ChunkWriter`), tests may plug in memory.

A step costs one :meth:`StepStore.begin` (claims the step and loads everything it needs) and
one :meth:`StepStore.save` (writes everything it produced and reports its result); the other
methods serve crash safety mid-step (a recorded model output, tool results, a processor retry).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, Protocol, TypedDict

import orjson

from threadline.errors import UnknownEventError
from threadline.events.chunk_types import Emitted, ToolCallPayload
from threadline.events.json_types import JSONObject, JSONValue
from threadline.orchestration.children import ChildRequest
from threadline.runtime.editor import EditorOverrides
from threadline.runtime.message_types import (
    CoreMessage,
    RecordedOutput,
    StepSummary,
    ToolSpec,
)
from threadline.runtime.model.model_outcome import ModelOutcome, Usage

STATE_VERSION = 1
"""The layout of ``runs.state`` this release writes (its ``version`` key); a newer one is refused."""

STATE_VERSIONS: dict[int, str] = {
    1: "message_list, response_message_id, retry_count, processor_state, steps, usage, and when set "
       "system_snapshot, editor, sub_agent_calls, approval_calls; a state stored with no version reads as 1",
}
"""One line per layout of ``runs.state``, oldest first (tests/contract/run_state/ keeps one frozen
state per version, read by today's code)."""


class StateVersionError(UnknownEventError):
    """A run's stored state has a newer layout than this worker reads (a newer release wrote it,
    during a rolling deploy). Raised by the claim, so the step is not run: the worker's record
    handling dead-letters the step task with code ``state_version`` and this message (an
    :class:`~threadline.errors.InvalidEventError`: not retried, no crash loop); the recovery
    sweep later reschedules the stuck step (``reschedule``, docs of
    :mod:`threadline.orchestration.recovery`), which a worker of the newer release then runs, and
    fails the run after ``max_recoveries`` rescheduled attempts made no progress."""

    def __init__(self, version: object) -> None:
        super().__init__(f"run state version {version!r} is unknown to this worker (it reads 1 to "
                         f"{STATE_VERSION}; a newer release wrote it?): the step is not run here", code="state_version")
        self.version = version


def state_version(stored: Mapping[str, object]) -> int:
    """The layout version of a stored state (absent: 1).

    Raises:
        StateVersionError: a version this release does not know (newer, or not a positive integer).
    """
    version = stored.get("version", 1)
    if type(version) is not int or version not in STATE_VERSIONS:
        raise StateVersionError(version)
    return version


class StoredState(TypedDict):
    """``runs.state`` as :meth:`RunState.dump` writes it (layout :data:`STATE_VERSION`)."""

    version: int
    processor_state: dict[str, JSONObject]
    steps: list[StepSummary]
    usage: Usage
    message_list: JSONObject | None
    retry_count: int
    response_message_id: str | None
    system_snapshot: NotRequired[list[Mapping[str, object]]]
    editor: NotRequired[EditorOverrides]
    sub_agent_calls: NotRequired[list[ToolCallPayload]]
    approval_calls: NotRequired[list[ToolCallPayload]]


@dataclass(slots=True)
class RunState:
    """A run's working state between its steps (stored as JSON in ``runs.state``, with the layout
    version :data:`STATE_VERSION` under ``version``)."""

    message_list: JSONObject | None = None
    """The run's :class:`~threadline.runtime.messages.MessageList` (``to_state()``); ``None``
    before the first step ended."""
    response_message_id: str | None = None
    """The id of the assistant message the next step appends to."""
    retry_count: int = 0
    """Consecutive processor retries of the current step (capped by ``max_processor_retries``)."""
    processor_state: dict[str, JSONObject] = field(default_factory=dict)
    """Each processor's ``state`` dict, by processor id, kept across steps."""
    steps: list[StepSummary] = field(default_factory=list)
    """One summary per finished step: ``{stepNumber, text, toolCalls, toolResults, finishReason, usage}``."""
    usage: Usage = field(default_factory=lambda: Usage())
    """Token usage summed over the steps (``inputTokens``, ``outputTokens``, ``totalTokens``,
    ``partial`` when a step reported none)."""
    system_snapshot: list[Mapping[str, object]] | None = None
    """The system messages after the input processors of step 0; each step starts from them."""
    editor: EditorOverrides | None = None
    """The editor overrides the run started with (read at step 0, locked fields stripped); its
    later steps, on any worker, use these and not newer ones (decision 69)."""
    sub_agent_calls: list[ToolCallPayload] | None = None
    """``{toolCallId, toolName, args}`` of the sub-agent calls the last (suspended) step waits
    for; the next step begins by putting their stored results into the invocations."""
    approval_calls: list[ToolCallPayload] | None = None
    """``{toolCallId, toolName, args}`` of the calls the last (suspended) step holds for a
    person's approval (decision 226); the next step begins by running the approved ones and
    reporting the declined ones."""
    live: bool = False
    """The state is the previous step's own objects (:meth:`carried`), not a stored copy: its
    ``message_list`` holds the live messages, used as they are. Not stored."""

    @classmethod
    def of(cls, stored: Mapping[str, object] | None) -> RunState:
        """The state as stored (``None``/``{}``: a new run). The stored dict is not shared: it is
        copied through JSON (a state read from ``runs.state`` holds JSON values only; ~8x faster
        than ``copy.deepcopy``, which took 0.54 ms per step at 60 messages), or deep-copied when it
        holds anything JSON cannot carry.

        Raises:
            StateVersionError: the state has a newer layout than :data:`STATE_VERSION`.
        """
        state_version(stored or {})  # every known version reads as today's (only 1 so far)
        return cls._of_fields(_json_copy(dict(stored or {})), live=False)

    @classmethod
    def carried(cls, dumped: Mapping[str, object]) -> RunState:
        """The state a step of this worker just stored (its :meth:`dump`), as the same objects,
        for the run's next step on this worker (decision 102): no copy, no decoding. Values JSON
        would change (a tuple, a datetime) stay as they were, as in one process; a step taken
        over elsewhere reads them as stored."""
        return cls._of_fields(dumped, live=True)

    @classmethod
    def _of_fields(cls, data: Mapping[str, Any], *, live: bool) -> RunState:
        """The state whose :meth:`dump` is ``data`` (its objects, as they are)."""
        return cls(message_list=data.get("message_list"), response_message_id=data.get("response_message_id"),
                   retry_count=int(data.get("retry_count") or 0), processor_state=data.get("processor_state") or {},
                   steps=data.get("steps") or [], usage=data.get("usage") or Usage(),
                   system_snapshot=data.get("system_snapshot"), editor=data.get("editor"),
                   sub_agent_calls=data.get("sub_agent_calls"), approval_calls=data.get("approval_calls"),
                   live=live)

    def dump(self) -> StoredState:
        """The JSON stored in ``runs.state`` (``version``: :data:`STATE_VERSION`)."""
        out: StoredState = {"version": STATE_VERSION, "processor_state": self.processor_state,
                               "steps": self.steps, "usage": self.usage, "message_list": self.message_list,
                               "retry_count": self.retry_count, "response_message_id": self.response_message_id}
        if self.system_snapshot is not None:
            out["system_snapshot"] = self.system_snapshot
        if self.editor:
            out["editor"] = self.editor
        if self.sub_agent_calls:
            out["sub_agent_calls"] = self.sub_agent_calls
        if self.approval_calls:
            out["approval_calls"] = self.approval_calls
        return out


def _json_copy(value: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``value`` through ``orjson``, as PostgreSQL would give it back (a tuple
    becomes a list); ``copy.deepcopy`` when orjson cannot encode it (a set, a non-string key)."""
    try:
        copied: dict[str, Any] = orjson.loads(orjson.dumps(value))
    except TypeError:  # orjson.JSONEncodeError: a value or key JSON cannot carry
        return copy.deepcopy(value)
    return copied


@dataclass(slots=True)
class StepRun:
    """The run whose current step executes, as claimed."""

    run_id: str
    """The run."""
    resource_id: str
    """The thread's owner."""
    thread_id: str
    """The thread."""
    agent_id: str
    """The run's agent."""
    epoch: int
    """The lease epoch the run holds (every write is fenced by it)."""
    step: int
    """The step being executed (0-based)."""
    next_seq: int
    """The first chunk ``seq`` of this step as stored before the claim."""
    options: dict[str, Any]
    """The run's options (normalised names)."""
    state: RunState
    """The run's working state as the previous step left it."""
    stored_state: dict[str, Any] | None = None
    """``runs.state`` as read (written back unchanged when the step cannot run at all)."""
    stored_json: bytes | None = None
    """``runs.state`` as this worker stored it (JSON), when the step was continued from memory
    (:meth:`RunState.carried`) and not read back; :meth:`stored` decodes it."""

    def stored(self) -> dict[str, Any]:
        """``runs.state`` as stored before this step (a fresh dict; ``{}`` for a new run)."""
        if self.stored_json is not None:
            loaded: dict[str, Any] = orjson.loads(self.stored_json)
            return loaded
        return dict(self.stored_state or {})


@dataclass(frozen=True, slots=True)
class Signal:
    """A signal addressed to the run, drained by this step."""

    id: str
    """The signal id."""
    payload: JSONObject
    """The signal (``{id, type, tagName, contents, attributes, metadata, createdAt}``)."""


@dataclass(slots=True)
class StepInputs:
    """Everything a claimed step reads, loaded at the claim."""

    attempt: int
    """This execution's attempt number."""
    seq_base: int
    """The first chunk ``seq`` reserved for this attempt."""
    restarted: bool
    """An earlier attempt of the step started and never finished (its chunks are discarded)."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """Step 0: the thread's stored messages, oldest first (other steps: empty)."""
    signals: list[Signal] = field(default_factory=list)
    """Signals drained by this step, in arrival order (step 0: not the deliveries)."""
    recorded: RecordedOutput | None = None
    """The model output a crashed attempt recorded: ``{chunks, usage, finish_reason}``."""
    overrides: JSONObject | None = None
    """Step 0: the agent's stored editor overrides, read by the claim (decision 95; ``{}`` or
    ``None``: none)."""


@dataclass(frozen=True, slots=True)
class Claimed:
    """The step is this worker's: run it."""

    run: StepRun
    """The run."""
    inputs: StepInputs
    """What it reads."""


@dataclass(frozen=True, slots=True)
class Busy:
    """Another worker executes the step and may be alive (its heartbeat is ``heartbeat``)."""

    heartbeat: object
    """The heartbeat value seen (compared on the next try)."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """The task is stale or done already (nothing to do)."""

    reason: str
    """Why, for the log."""


@dataclass(frozen=True, slots=True)
class AbortedRun:
    """The run was aborted while its step task was in flight; its stream is not ended yet."""

    run: StepRun
    """The run."""


Begun = Claimed | Busy | Skipped | AbortedRun
"""What :meth:`StepStore.begin` answers."""


@dataclass(frozen=True, slots=True)
class Continue:
    """The run takes another step."""

    finish_reason: str | None
    """The model's finish reason of this step (``tool-calls``, ``stop``…)."""
    wire: Literal["continue"] = "continue"


@dataclass(frozen=True, slots=True)
class Finish:
    """The run ended normally."""

    finish_reason: str
    """The model's finish reason of the last step."""
    wire: Literal["finished"] = "finished"


@dataclass(frozen=True, slots=True)
class Fail:
    """The run failed."""

    error: JSONObject
    """``{kind, message, statusCode?}``."""
    finish_reason: str = "error"
    wire: Literal["failed"] = "failed"


@dataclass(frozen=True, slots=True)
class Trip:
    """A processor blocked the run."""

    tripwire: dict[str, Any]
    """``{reason, retry, metadata, processorId}``."""
    finish_reason: str = "other"
    wire: Literal["tripwire"] = "tripwire"


@dataclass(frozen=True, slots=True)
class Suspend:
    """The step called sub-agents or tools that need approval: it waits for their child runs
    (decision 77) and the approvals (decision 226); the orchestrator starts the children and
    schedules the next step once they all ended and every approval was answered."""

    finish_reason: str | None
    """The model's finish reason of this step (``tool-calls``)."""
    wire: Literal["suspended"] = "suspended"


StepOutcome = Continue | Finish | Fail | Trip | Suspend
"""How a step ended; ``wire`` is the ``StepResult.outcome`` it reports."""


@dataclass(slots=True)
class StepRecord:
    """Everything a step produced, saved in one transaction with its result."""

    run: StepRun
    """The run."""
    attempt: int
    """The attempt that produced it (a later attempt fences it out)."""
    outcome: StepOutcome
    """How the step ended."""
    entries: Sequence[tuple[Mapping[str, object], str]]
    """The message list's entries ``(message, source)``; ``input``/``response`` ones are stored."""
    consumed: list[str] | None
    """Signals this step consumed; ``None``: every signal still pending for the run (it failed)."""
    state: Mapping[str, object]
    """The run's working state to store (:meth:`RunState.dump`)."""
    next_seq: int
    """The next chunk ``seq`` of the run."""
    text: str | None = None
    """The final text (a run that ended)."""
    usage: Usage | None = None
    """Usage summed over the run's steps (``None``: the step could not run at all)."""
    finish: dict[str, Any] | None = None
    """The run's stamped ``finish`` chunk, held back by the sink: stored with the result (in the
    outbox, same transaction) and published only then (decision 19)."""
    children: list[ChildRequest] = field(default_factory=list)
    """The sub-agent calls the step waits for (:class:`~threadline.orchestration.children.ChildRequest`),
    recorded in the same transaction as the step (a ``suspended`` outcome)."""
    approvals: list[ToolCallPayload] = field(default_factory=list)
    """The calls the step holds for approval (``{toolCallId, toolName, args}``), recorded in the
    same transaction as the step (a ``suspended`` outcome)."""


class ChunkSink(Protocol):
    """Where a step's chunks go: stamps ``runId``/``step``/``attempt``/``seq`` and publishes."""

    run_id: str
    step: int
    attempt: int
    seq: int
    finished: bool
    """A ``finish`` chunk was published (or stored to be, :meth:`finish_stored`)."""
    held: dict[str, Any] | None
    """The stamped ``finish`` chunk held back instead of published, if any (decision 19): the
    step store saves it with the step's result and it is published only once that is durable."""

    async def emit(self, chunk: Emitted) -> dict[str, Any]:
        """Stamp and send ``chunk`` (a ``finish`` may be held, :attr:`held`); returns it stamped."""
        ...

    async def flush(self) -> None:
        """Wait until every emitted chunk is acknowledged (raises the first delivery failure)."""
        ...

    def drop_held(self) -> None:
        """Forget the held ``finish``, never stored (its step could not be saved): its ``seq``
        goes to the next chunk, and later finishes are sent, not held."""
        ...

    def finish_stored(self) -> None:
        """The held ``finish`` was stored with the step's result (published from there): nothing
        is held any more and the stream counts as finished."""
        ...


class StepStore(Protocol):
    """Where a step's state is loaded and saved, fenced by the thread lease (each write raises
    :class:`~threadline.errors.StaleWriterError` once the run lost the thread or a later attempt
    took the step over)."""

    async def begin(self, run_id: str, *, step: int, epoch: int, takeover_from: object = None) -> Begun:
        """Claim the run's step ``step`` and load what it reads (one call).

        ``takeover_from``: the heartbeat value the caller watched stand still (the step is taken
        from its owner only if the heartbeat still has that value or was handed back)."""
        ...

    async def save(self, record: StepRecord) -> None:
        """Write the step's messages, consumed signals, state and result (one call), then
        report the result to the orchestrator."""
        ...

    async def record_model_output(self, run: StepRun, attempt: int, output: dict[str, Any],
                                  call_ids: Sequence[str] = ()) -> dict[str, tuple[JSONValue, str | None]]:
        """Keep the model's completed output of ``attempt`` (before its tools run) so a
        re-execution replays it instead of asking again; this worker still executes ``attempt``
        (its heartbeat refreshed, as :meth:`still_owner`). Returns the results ``(result,
        error)`` of the tool calls among ``call_ids`` that already ran, by call id (as
        :meth:`tool_results`).

        Raises:
            StaleWriterError: the run no longer holds the thread, or another attempt or worker
                owns the step (nothing is recorded then)."""
        ...

    async def restart_attempt(self, run: StepRun, attempt: int, retry_count: int) -> None:
        """A processor retry: the step continues as ``attempt`` (the previous one is dead)."""
        ...

    async def tool_results(self, run: StepRun, call_ids: list[str]) -> dict[str, tuple[JSONValue, str | None]]:
        """Results ``(result, error)`` of the tool calls that already ran, by call id."""
        ...

    async def save_tool_result(self, run: StepRun, call_id: str, tool_name: str, result: JSONValue,
                               error: str | None) -> None:
        """Record what a tool call returned (once)."""
        ...

    async def hold_call(self, run: StepRun, call: ToolCallPayload) -> None:
        """Record ``call`` as held for approval (pending), before its ``tool-call-approval`` chunk
        goes out, so an answer sent as soon as the chunk is seen finds it (once: again changes
        nothing)."""
        ...

    async def approvals(self, run: StepRun, call_ids: list[str]) -> dict[str, tuple[str, str | None]]:
        """The answers to the calls held for approval: ``(status, reason)`` by call id, ``status``
        one of ``pending``, ``approved``, ``declined`` (a call never recorded is absent)."""
        ...

    async def still_owner(self, run: StepRun, attempt: int) -> bool:
        """This worker still executes ``attempt`` of the step (refreshes its heartbeat)."""
        ...

    async def more_pending(self, run: StepRun, exclude: list[str]) -> bool:
        """Signals other than ``exclude`` are pending for the run (it takes another step)."""
        ...


class ModelFn(Protocol):
    """The model call: yields Mastra chunks ``{type, payload}`` and fills ``outcome``
    (:func:`threadline.runtime.model.llm.stream_model`)."""

    def __call__(self, *, model: str, messages: list[CoreMessage], tools: list[ToolSpec] | None,
                 tool_choice: JSONValue, model_settings: JSONObject | None, provider_options: JSONObject | None,
                 api_base: str | None, timeout_s: float, outcome: ModelOutcome,
                 response_format: JSONObject | None = None) -> AsyncIterator[dict[str, Any]]:
        """Stream one model response (``response_format`` is passed only for structured output)."""
        ...

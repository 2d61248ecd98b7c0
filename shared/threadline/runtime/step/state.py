"""The mutable state of one step execution (``StepState``), the processors' and tools'
``writer``, and small helpers of the step executor."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from threadline._internal.attrdict import AttrDict, wrap
from threadline.config import DEFAULT_SUB_AGENT_MAX_DEPTH, DEFAULT_TOOL_TIMEOUT_S
from threadline.errors import ModelCallError
from threadline.events.chunk_types import Emitted, StepFinishPayload, ToolCallPayload
from threadline.events.json_types import JSONObject
from threadline.logging import get_logger
from threadline.runtime.agent import Agent
from threadline.runtime.json_form import json_form
from threadline.runtime.message_types import RecordedOutput, StepSummary
from threadline.runtime.messages import MessageList, make_message
from threadline.runtime.model.model_calls import ModelChoice
from threadline.runtime.model.model_outcome import USAGE_KEYS, ModelOutcome, Usage
from threadline.runtime.processor import ProcessorRunner
from threadline.runtime.step.ports import ChunkSink, RunState, StepRun
from threadline.runtime.sub_agents import Pending
from threadline.runtime.tools import Tool
from threadline.runtime.transform import SUPPRESS, display_chunk

log = get_logger(__name__)


class StepWriter:
    """``writer.custom(chunk)`` for processors and tools (docs/processors.md, "發出自訂資料 chunk")."""

    def __init__(self, step: StepState, *, through_processors: bool) -> None:
        self._step = step
        self._through = through_processors

    async def custom(self, chunk: Mapping[str, object], options: Mapping[str, object] | None = None) -> None:
        await self._step.custom_chunk(dict(chunk), through_processors=self._through)


@dataclass
class StepState:
    """Mutable state of one step execution: the run row, its message list, processors, the
    response message being built, steps so far, usage totals."""

    run: StepRun
    """The run whose step executes."""
    agent: Agent
    """The run's agent."""
    writer: ChunkSink
    """Where the step's chunks go."""
    ml: MessageList
    """The run's message list (replaced on a processor retry)."""
    runner: ProcessorRunner
    """The processors of the run."""
    response_id: str
    """The assistant message the step appends to."""
    steps: list[StepSummary]
    """Summaries of the run's finished steps (``RunState.steps``)."""
    state: RunState
    """The run's working state."""
    usage_total: Usage = field(default_factory=lambda: Usage())
    """Usage summed over the run (``RunState.usage``)."""
    echoes: list[Emitted] = field(default_factory=list)
    """Echo chunks of the drained signals (emitted once the input processors passed)."""
    recorded: RecordedOutput | None = None
    """The model output a crashed attempt of this step recorded (replayed once, not re-asked)."""
    models: list[ModelChoice] | None = None
    """The run's fallback list (resolved at the first attempt)."""
    model_index: int = 0
    """The fallback model in use; processor retries keep it."""
    tools: dict[str, Tool] | None = None
    """The run's tools (the agent's, a function of the request context resolved); ``None``: the agent's."""
    agent_metadata: JSONObject = field(default_factory=dict)
    """The agent's ``metadata`` for this run (tool hooks see it as ``metadata.agent_metadata``)."""
    attempt_output: dict[str, Any] | None = None
    """The current attempt's answer as the processors let it through (``{text, usage}``;
    ``None`` before the model answered): a rejected attempt's ``step-finish`` shows it."""
    judging: bool = False
    """``process_output_step`` is judging the current attempt's answer (an abort then ends a step
    the model finished)."""
    streamed: str = ""
    """The text the current attempt's model call streamed so far (as the processors let it
    through): a failed call's stored message keeps it."""
    streamed_model: str | None = None
    """The model the current attempt asked (``None`` before it did)."""
    parts_at: int | None = None
    """Where the current step's own parts (reasoning, text, tool invocations) begin among the
    response message's parts; ``None`` before the model answered. A ``data-*`` part written as
    the processors see the run's ``finish`` goes there, as Mastra adds a step's text after them."""
    tool_timeout_s: float | None = DEFAULT_TOOL_TIMEOUT_S
    """The run's default tool timeout (seconds; ``None``: none): a tool call or workflow step
    that sets no ``timeout_s`` ends as a ``ToolTimeoutError`` tool error after it (decision 218)."""
    sub_agent_max_depth: int = DEFAULT_SUB_AGENT_MAX_DEPTH
    """How deep a sub-agent tree may grow: a run this deep gets a tool error for a sub-agent call
    instead of a child run (decision 219)."""
    children: Pending = field(default_factory=Pending)
    """The sub-agent calls of the current attempt, waiting for their child runs (decision 77)."""
    approvals: list[ToolCallPayload] = field(default_factory=list)
    """The calls of the current attempt held for a person's approval (decision 226)."""
    require_tool_approval: bool = False
    """The run's ``require_tool_approval`` option (Mastra's ``requireToolApproval``): every tool
    call waits for approval, whatever its tool says."""
    last_step_finish: StepFinishPayload | None = None
    """The payload of the step's ``step-finish`` (the run's ``finish`` repeats its fields)."""
    finish: AttrDict | None = None
    """The run's ``finish``, seen by the processors before the last ``step-finish`` (emitted after
    ``process_output_result``); ``None`` while the run continues."""
    kept_parts: dict[int, dict[str, list[Any]]] = field(default_factory=dict)
    """The run's ``stream_parts`` of its steps on this worker (``RunConfig.stream_parts``)."""
    parts_base: dict[str, int] = field(default_factory=dict)
    """How many of each processor's ``stream_parts`` came from earlier steps."""
    _transforms: bool | None = None

    def next_model(self) -> bool:
        """Switch to the next fallback model; False when the one in use is the last."""
        if self.models is None or self.model_index + 1 >= len(self.models):
            return False
        self.model_index += 1
        return True

    async def emit(self, chunk: Emitted, *, processed: bool = True) -> AttrDict | None:
        """Send a chunk through ``process_output_stream`` (unless ``processed`` is False) and emit
        it, its tool payloads as the ``display`` transforms show them (decision 72). Returns the
        processed chunk, untransformed (what the step goes on with), or ``None`` when dropped."""
        part = wrap(chunk)
        if processed:
            part = await self.runner.process_output_stream(part, self.ml)
            if part is None:
                return None
        kept: AttrDict = part
        shown: Any = part
        if self.transforms:
            shown = await display_chunk(part, self.tools if self.tools is not None else self.agent.tools,
                                        self.agent.transform)
            if shown is SUPPRESS:
                return kept
            if shown is not part:
                shown = wrap(shown)
        await self.writer.emit(shown)
        return kept

    @property
    def transforms(self) -> bool:
        """Whether any tool payload transform applies to this run (the agent's or a tool's);
        looked up once per step (every chunk asks)."""
        if self._transforms is None:
            tools = self.tools if self.tools is not None else self.agent.tools
            self._transforms = self.agent.transform is not None or any(
                getattr(t, "transform", None) for t in tools.values())
        return self._transforms

    async def custom_chunk(self, chunk: dict[str, Any], *, through_processors: bool) -> None:
        if not str(chunk.get("type", "")).startswith("data-"):
            raise ValueError("writer.custom chunks must have a type starting with 'data-'")
        if "data" in chunk:  # one JSON for the stream and the stored part (decision 217); raises here, in the tool
            chunk = {**chunk, "data": json_form(chunk["data"], what="data")}
        transient = bool(chunk.get("transient"))
        part = await self.emit(chunk, processed=through_processors)
        if part is None or transient or not str(part.get("type", "")).startswith("data-"):
            return
        msg = self.response_message()
        msg["content"]["parts"].append(wrap({"type": part["type"], "data": part.get("data")}))

    def response_message(self) -> AttrDict:
        msg = self.ml.get_by_id(self.response_id)
        if msg is None:
            msg = make_message("assistant", [], id=self.response_id, thread_id=self.run.thread_id,
                               resource_id=self.run.resource_id)
            self.ml.add(msg, "response")
            msg = self.ml.get_by_id(self.response_id)
        assert msg is not None
        return msg


def mark_boundary(step: StepState) -> None:
    """The step's response message ends here, a drained signal coming after it: its
    ``metadata.mastra.responseBoundary`` is ``true``, as Mastra marks the message it seals when a
    signal rotates the response message id. Nothing when the run has no such message yet."""
    msg = step.ml.get_by_id(step.response_id)
    if msg is None or msg["role"] != "assistant":
        return
    meta = msg["content"].get("metadata") or {}
    msg["content"]["metadata"] = wrap({**meta, "mastra": {**(meta.get("mastra") or {}), "responseBoundary": True}})


def final_text(step: StepState) -> str:
    for msg in reversed(step.ml.get.response.db()):
        if msg["role"] == "assistant":
            texts = [p.get("text", "") for p in msg["content"].get("parts") or () if p.get("type") == "text"]
            if texts:
                return str(texts[-1])
    return ""


def add_usage(total: Usage, usage: Usage | None) -> None:
    if usage is None:
        total["partial"] = True
        return
    for key in USAGE_KEYS:
        if usage.get(key) is not None:
            total[key] = (total.get(key) or 0) + usage[key]


def error_view(exc: ModelCallError) -> AttrDict:
    view: AttrDict = wrap({"kind": exc.kind, "message": str(exc), "status_code": exc.status_code,
                 "retry_after_s": exc.retry_after_s, "retryable": exc.retryable})
    return view


async def replay(cached: Any, outcome: ModelOutcome) -> AsyncIterator[dict[str, Any]]:
    """Replay a cached response ``{chunks: [...]}`` as if it streamed (docs/decisions.md §7)."""
    chunks = cached.get("chunks") if isinstance(cached, dict) else cached
    for chunk in chunks or []:
        chunk = dict(chunk)
        payload = chunk.get("payload") or {}
        if chunk.get("type") == "text-delta":
            outcome.add_text(payload.get("text", ""))
        elif chunk.get("type") == "tool-call":
            outcome.tool_calls.append(cast(ToolCallPayload, dict(payload)))  # a stored tool-call chunk's payload
        elif chunk.get("type") == "finish":
            continue
        yield chunk
    outcome.finish_reason = "tool-calls" if outcome.tool_calls else "stop"

"""Stage 4 of an attempt: the step's summary joins ``RunState.steps``, the continuation rule
decides whether the run takes another step, and the ``step-finish`` chunk goes through the
output processors onto the stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from threadline._internal.attrdict import AttrDict, wrap
from threadline.events import chunks
from threadline.events.json_types import JSONObject
from threadline.logging import get_logger
from threadline.runtime.message_types import ToolOutcome
from threadline.runtime.processor import TripWire
from threadline.runtime.step.ports import StepStore
from threadline.runtime.step.prepare import ModelRequest
from threadline.runtime.step.respond import ModelResponse
from threadline.runtime.step.state import StepState

log = get_logger(__name__)

DEFAULT_MAX_STEPS = 5


@dataclass(frozen=True, slots=True)
class Attempted:
    """How one attempt of a step ended (no processor retry pending)."""

    finish_reason: str
    """The model's finish reason."""
    continued: bool
    """The run takes another step (tool results, or signals pending, within ``max_steps``)."""


def continues(*, results: bool, children: bool, pending: bool, step_no: int, max_steps: int) -> bool:
    """The continuation rule: a step waiting for child runs always continues (it suspends);
    otherwise tool results, or signals still pending, continue the run while ``step_no + 1 <
    max_steps``."""
    return children or ((results or pending) and step_no + 1 < max_steps)


async def conclude(step: StepState, request: ModelRequest, response: ModelResponse,
                   results: list[ToolOutcome], options: dict[str, Any], consumed: list[str],
                   store: StepStore) -> Attempted:
    """Record the step's summary, decide whether the run continues and emit ``step-finish``.
    ``consumed``: the signals this step drained (not counted as pending)."""
    step_no = step.run.step
    step.finish = None
    step.steps.append({"stepNumber": step_no, "text": response.text, "toolCalls": response.calls,
                       "toolResults": results, "finishReason": response.finish_reason, "usage": response.usage,
                       **({"object": response.object} if request.spec is not None and response.object is not None
                          else {})})
    children = bool(step.children.requests or step.approvals)  # the step suspends
    # pending signals matter only when nothing else continues the run (decision 88)
    pending = not results and not children and await store.more_pending(step.run, consumed)
    continued = continues(results=bool(results), children=children, pending=pending, step_no=step_no,
                          max_steps=int(options.get("max_steps") or DEFAULT_MAX_STEPS))
    caller = request.caller
    chunk = chunks.step_finish_chunk(step.response_id, reason=response.finish_reason, is_continued=continued,
                                     text=response.text, usage=response.usage, model=caller.choices[caller.index].model,
                                     raw_reason=response.raw_finish_reason, tool_calls=response.calls,
                                     response=response.provider)  # Mastra: 0 once a step is accepted
    step.last_step_finish = chunk["payload"]
    step_usage = chunk["payload"]["output"].get("usage")
    if step_usage is not None:  # Mastra's step usage: the counts and the provider's report `raw`
        step.steps[-1]["usage"] = step_usage
    if not continued:  # Mastra's processors see the run's finish before the last step-finish goes out
        step.finish = await finish_seen(step, response.finish_reason)
    await step.emit(chunk)
    return Attempted(response.finish_reason, continued)


async def finish_seen(step: StepState, reason: str, *, finish_reason: str | None = None,
                      tripwire: JSONObject | None = None, after_step: bool = True) -> AttrDict:
    """The run's ``finish`` chunk (for a run ending with ``reason``), through
    ``process_output_stream``: processors see it, and what they write then is emitted now, but
    they cannot drop or block it (an abort on it is logged and ignored). Emitted by the caller.
    ``finish_reason``: when not ``reason``. ``after_step``: the run ended with its step's
    ``step-finish`` (whose fields the finish repeats, as Mastra's does), not a tripwire or an error.
    After an abort in ``process_output_result`` (a ``tripwire`` once the last step was accepted)
    the finish is Mastra's: the step's ``stepResult.reason`` and no ``response``."""
    last = step.last_step_finish if after_step else None
    step_reason = last["stepResult"]["reason"] if last is not None else None
    result_rejected = tripwire is not None and step_reason not in (None, "tripwire")
    built = chunks.finish_chunk(step_reason if result_rejected and step_reason else reason,
                                finish_reason=finish_reason or reason, usage=step.usage_total, tripwire=tripwire,
                                last_step=last)
    if result_rejected:
        built["payload"].pop("response", None)
    chunk: AttrDict = wrap(built)
    written = len(_parts(step))
    try:  # the finish cannot be dropped: the processors' verdict is not used
        await step.runner.process_output_stream(chunk, step.ml)
    except TripWire as tw:
        log.warning("abort on the finish chunk ignored", processor_id=tw.processor_id)
    if after_step and step.parts_at is not None:
        before_step_parts(_parts(step), written, step.parts_at)
    return chunk


def _parts(step: StepState) -> list[Any]:
    """The parts of the step's response message (``[]`` when it has none yet)."""
    msg = step.ml.get_by_id(step.response_id)
    return msg["content"]["parts"] if msg is not None else []


def before_step_parts(parts: list[Any], written: int, at: int) -> None:
    """Move the parts from index ``written`` on (those the processors wrote as they saw the run's
    ``finish``) to index ``at``, before the step's own parts: Mastra adds a step's text to the
    message when the step ends, after what its stream's processors wrote (``[step-start, text,
    data]`` becomes ``[step-start, data, text]``). In place."""
    if written <= at or written >= len(parts):
        return
    parts[at:] = parts[written:] + parts[at:written]

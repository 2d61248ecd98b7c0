"""Tool approval in the step loop (Mastra's ``requireApproval`` / ``requireToolApproval``,
decisions 225-227), in the shape of a sub-agent wait (decision 77):

1. :func:`~.tools.run_tools` asks :func:`~.tools.needs_approval` of each call that has not run;
   a call that needs it is held (:func:`~.tools.hold`): its ``tool-call-approval`` chunk goes out, the call joins
   ``step.approvals`` and the step ends ``suspended`` (recorded with the step, the worker freed);
2. the orchestrator resumes the run once every held call of the step was approved or declined;
3. the resumed step begins with :func:`resume_approvals`: an approved call runs now (once: a call
   that already ran before a crash reuses its stored result), a declined one never runs and the
   model reads the decline's reason as its result (``tool-output-denied`` on the stream).
"""

from __future__ import annotations

from collections.abc import Mapping

from threadline.errors import StaleWriterError
from threadline.events.approval_chunks import decline_reason, tool_output_denied_chunk
from threadline.events.chunk_types import ToolCallPayload
from threadline.logging import get_logger
from threadline.runtime.message_types import ToolOutcome
from threadline.runtime.step.ports import StepStore
from threadline.runtime.step.state import StepState
from threadline.runtime.step.tools import execute_call, set_invocation, tool_outcome
from threadline.runtime.tools import Tool, ToolHooks

log = get_logger(__name__)


async def resume_approvals(step: StepState, store: StepStore, hooks: ToolHooks) -> None:
    """Step 3 of the module docstring, for each call in ``step.state.approval_calls``; the
    outcomes join the suspended step's summary. A call still pending or never recorded (never
    expected: the orchestrator resumes the run only once every call was answered) is declined
    with the default reason, so the model is never left with an unanswered call.

    Raises:
        StaleWriterError: another attempt or worker owns the step (before an approved tool runs).
    """
    calls, run = step.state.approval_calls or [], step.run
    step.state.approval_calls = None
    answers = await store.approvals(run, [c["toolCallId"] for c in calls])
    done = await store.tool_results(run, [c["toolCallId"] for c in calls])
    tools: Mapping[str, Tool] = step.tools if step.tools is not None else step.agent.tools
    results: list[ToolOutcome] = []
    for call in calls:
        status, reason = answers.get(call["toolCallId"], ("pending", None))
        if status != "approved":
            if status != "declined":
                log.warning("approval missing at resume: declined", tool_call_id=call["toolCallId"])
            results.append(await _declined(step, call, decline_reason(reason)))
            continue
        if call["toolCallId"] in done:  # ran before a crash: never run a side effect twice
            result, error = done[call["toolCallId"]]
        else:
            if not await store.still_owner(run, step.writer.attempt):
                raise StaleWriterError(run.run_id, run.epoch)
            result, error = await execute_call(step, call, dict(tools), hooks, store, step_number=run.step - 1)
        set_invocation(step.ml, step.response_id, call["toolCallId"],
                       approval={"id": call["toolCallId"], "approved": True})
        results.append(await tool_outcome(step, call, result, error))
    if step.steps:
        step.steps[-1]["toolResults"] = [*(step.steps[-1].get("toolResults") or []), *results]


async def _declined(step: StepState, call: ToolCallPayload, reason: str) -> ToolOutcome:
    """A declined call: its invocation ``output-denied`` with ``approval``, as Mastra stores it
    (the model reads ``reason``), and ``tool-output-denied`` on the stream."""
    set_invocation(step.ml, step.response_id, call["toolCallId"], state="output-denied",
                   approval={"id": call["toolCallId"], "approved": False, "reason": reason})
    await step.emit(tool_output_denied_chunk(call["toolCallId"], call["toolName"], call.get("args"), reason))
    return {"toolCallId": call["toolCallId"], "toolName": call["toolName"], "result": reason}

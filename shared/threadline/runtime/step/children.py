"""The step loop's side of a resumed parent step (decision 77): the sub-agent calls its suspended
step left in state ``call`` get their child runs' outcomes, which the orchestrator stored as the
step's tool results when the children ended."""

from __future__ import annotations

from threadline.runtime.step.ports import StepStore
from threadline.runtime.step.state import StepState
from threadline.runtime.step.tools import after_sub_agent, read_result, tool_outcome
from threadline.runtime.tools import ToolHooks


async def resume_children(step: StepState, store: StepStore, hooks: ToolHooks) -> None:
    """For each call in ``step.state.sub_agent_calls``: the tool hooks' ``after_tool_call``,
    ``process_tool_result`` (a result, not an error), then ``tool_outcome`` (the invocation
    updated, the ``tool-result`` / ``tool-error`` chunk through the output processors); the
    results join the suspended step's summary. A call
    with no stored result (never expected: the orchestrator schedules the step only once every
    child's result is stored) becomes a tool error."""
    calls, run = step.state.sub_agent_calls or [], step.run
    step.state.sub_agent_calls = None
    done = await store.tool_results(run, [c["toolCallId"] for c in calls])
    results = []
    for call in calls:
        result, error = done.get(call["toolCallId"], (None, "sub-agent result missing"))
        await after_sub_agent(step, call, hooks, result, error)
        if error is None:
            await step.runner.process_tool_result(step.ml, step_number=run.step - 1, steps=step.steps,
                                                  tool_name=call["toolName"], tool_call_id=call["toolCallId"],
                                                  args=call.get("args"), result=result)
            found, replaced = read_result(step.ml, call["toolCallId"])
            result = replaced if found else result
        results.append(await tool_outcome(step, call, result, error, sub_agent=True))
    if step.steps:
        step.steps[-1]["toolResults"] = [*(step.steps[-1].get("toolResults") or []), *results]

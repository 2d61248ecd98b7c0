"""Stage 3 of an attempt, the step's tools: each call at most once per run, with hooks around
it, ``process_tool_result`` after it, the result into the message list and onto the stream
(Mastra's Agent API "Tool hook", docs/processors.md ``processToolResult``); a sub-agent call
becomes a child run (decision 77)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from threadline._internal.attrdict import AttrDict, wrap
from threadline._internal.faults import armed, pause_point
from threadline._internal.usercode import call_user
from threadline.errors import NotSerialisableError, StaleWriterError
from threadline.events import chunks
from threadline.events.approval_chunks import tool_call_approval_chunk
from threadline.events.chunk_types import ToolCallPayload
from threadline.events.json_types import JSONObject, JSONValue
from threadline.logging import get_logger
from threadline.ops import tracing
from threadline.orchestration.children import depth_limit_error, depth_of
from threadline.runtime.json_form import json_form
from threadline.runtime.message_types import ToolOutcome
from threadline.runtime.messages import MessageList
from threadline.runtime.step.ports import StepStore
from threadline.runtime.step.state import StepState, StepWriter
from threadline.runtime.sub_agent_names import sub_agent_model_output
from threadline.runtime.sub_agents import SubAgentTool, request_for
from threadline.runtime.tools import Tool, ToolContext, ToolHooks, bounded, deadline_s
from threadline.runtime.workflows import journal_factory
from threadline.text import clean_json, clean_text

if TYPE_CHECKING:
    from threadline.runtime.step.respond import ModelResponse

log = get_logger(__name__)
Done = dict[str, tuple[Any, "str | None"]]
"""The tool calls that already ran in this step, ``(result, error)`` by call id."""


def step_hooks(step: StepState, options: Mapping[str, object], named: Mapping[str, object]) -> ToolHooks:
    """The agent's tool hooks merged with the call's (``options["hooks"]``; a name in a JSON
    request is looked up in ``named``, the catalogue's hooks)."""
    call_hooks = options.get("hooks")
    if isinstance(call_hooks, str):
        call_hooks = named.get(call_hooks)
    return step.agent.hooks.merged(ToolHooks.of(call_hooks))


async def run_tools(step: StepState, response: ModelResponse, tools: dict[str, Tool], hooks: ToolHooks,
                    store: StepStore) -> list[ToolOutcome]:
    """Run the step's tool calls in order, each at most once per run; returns their results
    ``{toolCallId, toolName, result | error}`` (a sub-agent call has none yet: it is queued in
    ``step.children``, nor does a call held for approval: it is queued in ``step.approvals``).
    A fresh model output is recorded first, so a re-execution replays it
    and reuses the results of the calls that ran (decision 88).

    Raises:
        StaleWriterError: another attempt or worker owns the step (before a tool would run).
    """
    if response.finish_reason != "tool-calls":
        return []
    run, ids = step.run, [c["toolCallId"] for c in response.calls]
    done: Done | None = None
    owned = False  # the owner was just confirmed: the first tool needs no second check
    if response.fresh:  # before any tool runs: a re-execution replays this
        output = {"chunks": [{"type": c["type"], "payload": c.get("payload")} for c in response.chunks],
                  "usage": response.usage, "finish_reason": response.finish_reason}
        done = await store.record_model_output(run, step.writer.attempt, output, ids)
        owned = not armed("after_model_output_recorded")  # a held owner asks again
        await pause_point("after_model_output_recorded")
    if done is None:
        done = await store.tool_results(run, ids)
    results = []
    for call in response.calls:
        sub = tools.get(call["toolName"])
        if isinstance(sub, SubAgentTool) and call["toolCallId"] not in done:  # a child run (decision 77)
            if depth_of(run.options) >= step.sub_agent_max_depth:  # the tree is deep enough (decision 219)
                skipped: tuple[JSONValue, str | None] | None = (None, depth_limit_error(step.sub_agent_max_depth))
            else:
                skipped = await _before_sub_agent(step, call, hooks)
            if skipped is None:
                step.children.requests.append(request_for(run.run_id, run.thread_id, sub, call))
                step.children.calls.append(ToolCallPayload(toolCallId=call["toolCallId"], toolName=call["toolName"],
                                                           args=call.get("args")))
                continue
            if not owned and not await store.still_owner(run, step.writer.attempt):
                raise StaleWriterError(run.run_id, run.epoch)
            await store.save_tool_result(run, call["toolCallId"], call["toolName"], *skipped)
            done[call["toolCallId"]] = skipped
        if call["toolCallId"] not in done and needs_approval(tools.get(call["toolName"]),
                                                             run_option=step.require_tool_approval):
            await hold(step, call, store)  # the step suspends; the resumed step runs it (decision 226)
            continue
        if call["toolCallId"] in done:  # ran before a crash: never run a side effect twice
            result, error = done[call["toolCallId"]]
            log.info("tool result reused", tool=call["toolName"], tool_call_id=call["toolCallId"])
        else:  # still this step's owner? (else another worker runs it)
            if not owned and not await store.still_owner(run, step.writer.attempt):
                raise StaleWriterError(run.run_id, run.epoch)
            result, error = await execute_call(step, call, tools, hooks, store)
        owned = False  # a tool ran (or was reused) since: the next one asks again
        results.append(await tool_outcome(step, call, result, error, sub_agent=isinstance(sub, SubAgentTool)))
    return results


async def execute_call(step: StepState, call: ToolCallPayload, tools: dict[str, Tool], hooks: ToolHooks,
                       store: StepStore, *, step_number: int | None = None) -> tuple[JSONValue, str | None]:
    """Run one call, then ``process_tool_result`` (``step_number``: the step that called it,
    default the current one); record what ran (the processed view only)."""
    run, agent = step.run, step.agent
    ctx = ToolContext(tool_call_id=call["toolCallId"], run_id=run.run_id, thread_id=run.thread_id,
                      resource_id=run.resource_id, agent_id=agent.id, step=run.step,
                      idempotency_key=f"{run.run_id}:{call['toolCallId']}",
                      writer=StepWriter(step, through_processors=True), request_context=step.runner.request_context,
                      journal=journal_factory(store, run, step.writer.attempt), default_timeout_s=step.tool_timeout_s)
    try:
        with tracing.span(f"execute_tool {call['toolName']}", **{
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call["toolName"],
                "gen_ai.tool.call.id": call["toolCallId"]}):
            output, error = await run_tool_call(call=call, tools=tools, hooks=hooks, context=ctx,
                                                agent_meta=agent_meta(step))
    except asyncio.CancelledError:  # an abort (or a shutdown) stops the step: tell the tool
        ctx.abort_signal.set()
        raise
    final = output
    if error is None:
        await step.runner.process_tool_result(step.ml, step_number=run.step if step_number is None else step_number,
                                              steps=step.steps, tool_name=call["toolName"],
                                              tool_call_id=call["toolCallId"], args=call.get("args"), result=output)
        found, replaced = read_result(step.ml, call["toolCallId"])
        final, error = encoded(replaced, None) if found else (output, None)
    await store.save_tool_result(run, call["toolCallId"], call["toolName"], final, error)
    await pause_point("after_tool_result_stored", run.thread_id)
    return final, error


async def tool_outcome(step: StepState, call: ToolCallPayload, result: JSONValue, error: str | None, *,
                       sub_agent: bool = False) -> ToolOutcome:
    """Put a tool's (final) result or error into the list and onto the stream; returns the
    step summary's entry ``{toolCallId, toolName, result | error}``. A ``sub_agent`` call's result
    gets Mastra's ``providerMetadata.mastra.modelOutput`` (what the model reads of it) on its
    stored part and its ``tool-result`` chunk."""
    base: ToolOutcome = {"toolCallId": call["toolCallId"], "toolName": call["toolName"]}
    if error is not None:
        set_invocation(step.ml, step.response_id, call["toolCallId"], state="output-error", errorText=error)
        tools = step.tools if step.tools is not None else step.agent.tools
        name = tool_error_name(error, call["toolName"], tools)
        await step.emit(chunks.tool_error_chunk(call["toolCallId"], call["toolName"], call.get("args"), error,
                                                name=name))
        return {**base, "error": error}
    set_invocation(step.ml, step.response_id, call["toolCallId"], state="result", result=result)
    output = sub_agent_model_output(result) if sub_agent else None
    metadata: JSONObject | None = {"mastra": {"modelOutput": output}} if output is not None else None
    if metadata is not None:
        _set_part_metadata(step.ml, step.response_id, call["toolCallId"], metadata)
    await step.emit(chunks.tool_result_chunk(call["toolCallId"], call["toolName"], call.get("args"), result,
                                             provider_metadata=metadata))
    return {**base, "result": result}


async def run_tool_call(*, call: ToolCallPayload, tools: dict[str, Tool], hooks: ToolHooks,
                        context: ToolContext, agent_meta: Mapping[str, object]) -> tuple[JSONValue, str | None]:
    """Run one call with its hooks. Returns ``(result, error_text)``; ``error_text`` is set when
    the tool is unknown, its input invalid, or it raised (then ``result`` is ``None``). U+0000 and
    lone surrogate halves in the result and the error text are replaced by U+FFFD (decision 18). The
    result is brought to JSON by the one rule of :mod:`threadline.runtime.json_form` (decision
    217): a result with no JSON form is the call's error, naming its type and path."""
    output, error = await _run(call=call, tools=tools, hooks=hooks, context=context, agent_meta=agent_meta)
    output, error = encoded(output, error)
    return clean_json(output), (clean_text(error) if error is not None else None)


def encoded(output: object, error: str | None) -> tuple[JSONValue, str | None]:
    """``(output, error)`` with ``output`` as plain JSON (:func:`json_form`); ``(None, why)`` when
    it has no JSON form. An error stays as it is. Never raises for the value: a result that
    cannot be encoded is deterministic, never a fault to retry (the tool would run again)."""
    if error is not None:
        return None, error
    try:
        return json_form(output), None
    except NotSerialisableError as exc:
        log.info("tool result not JSON-serialisable", error=str(exc))
        return None, str(exc)


def agent_meta(step: StepState) -> dict[str, Any]:
    """A tool hook's ``metadata``: the agent's id and name (Mastra's ``agentId``, ``agentName``)."""
    agent = step.agent
    return {"agent_id": agent.id, "agentId": agent.id, "agent_name": agent.name, "agentName": agent.name,
            "agent_metadata": step.agent_metadata}


def hook_context(call: ToolCallPayload, *, run_id: str, thread_id: str, resource_id: str,
                 meta: Mapping[str, object]) -> AttrDict:
    """What a tool hook gets: ``tool_name``, ``input``, ``context`` (the call's ids), ``metadata``."""
    name = call["toolName"]
    ctx: AttrDict = wrap({"tool_name": name, "toolName": name, "input": call.get("args") or {},
                          "context": {"tool_call_id": call["toolCallId"], "run_id": run_id,
                                      "thread_id": thread_id, "resource_id": resource_id},
                          "metadata": dict(meta)})
    return ctx


def needs_approval(tool: object, *, run_option: bool) -> bool:
    """A call of ``tool`` waits for approval: the run's ``require_tool_approval`` option is set,
    or the tool says ``require_approval``. A call of an unknown tool never waits (it fails with
    Mastra's not-found error instead)."""
    if tool is None:
        return False
    return run_option or bool(getattr(tool, "require_approval", False))


async def hold(step: StepState, call: ToolCallPayload, store: StepStore) -> None:
    """Hold ``call`` for approval: record it (before anyone can see it and answer), emit
    ``tool-call-approval`` and queue it in ``step.approvals``."""
    await store.hold_call(step.run, call)
    await step.emit(tool_call_approval_chunk(call["toolCallId"], call["toolName"], call.get("args")))
    step.approvals.append(ToolCallPayload(toolCallId=call["toolCallId"], toolName=call["toolName"],
                                          args=call.get("args")))


async def _before_sub_agent(step: StepState, call: ToolCallPayload,
                            hooks: ToolHooks) -> tuple[JSONValue, str | None] | None:
    """``before_tool_call`` around a sub-agent call (Mastra wraps every tool, sub-agents too):
    ``(output, error)`` when it answered ``{proceed: False, output}`` (no child run, and no
    ``after_tool_call``, as for any skipped tool; ``error`` when the output has no JSON form),
    else ``None``."""
    if hooks.before_tool_call is None:
        return None
    run = step.run
    ctx = hook_context(call, run_id=run.run_id, thread_id=run.thread_id, resource_id=run.resource_id,
                       meta=agent_meta(step))
    decision = await call_user(hooks.before_tool_call, ctx)
    if not (isinstance(decision, dict) and decision.get("proceed") is False):
        return None
    output, error = encoded(decision.get("output"), None)
    return clean_json(output), error


async def after_sub_agent(step: StepState, call: ToolCallPayload, hooks: ToolHooks, output: Any,
                          error: str | None) -> None:
    """``after_tool_call`` once a sub-agent call's child run ended (its result, or its error)."""
    if hooks.after_tool_call is None:
        return
    run = step.run
    ctx = hook_context(call, run_id=run.run_id, thread_id=run.thread_id, resource_id=run.resource_id,
                       meta=agent_meta(step))
    await _after(hooks, ctx, output, error)


async def _run(*, call: ToolCallPayload, tools: dict[str, Tool], hooks: ToolHooks,
               context: ToolContext, agent_meta: Mapping[str, object]) -> tuple[JSONValue, str | None]:
    name, args = call["toolName"], call.get("args") or {}
    hook_ctx = hook_context(call, run_id=context.run_id, thread_id=context.thread_id,
                            resource_id=context.resource_id, meta=agent_meta)
    if hooks.before_tool_call is not None:
        decision = await call_user(hooks.before_tool_call, hook_ctx)
        if isinstance(decision, dict) and decision.get("proceed") is False:  # Mastra: no afterToolCall then
            return decision.get("output"), None
    tool = tools.get(name)
    output = None
    error: str | None = None
    if tool is None:
        error = unknown_tool_error(name, tools)
    else:
        try:
            output = await bounded(tool.run(args, context), deadline_s(tool.timeout_s, context.default_timeout_s),
                                   f"tool {name}", context.abort_signal)
        except Exception as exc:
            if getattr(exc, "interrupts_step", False):  # a workflow lost its step or journal (decision 81)
                raise
            error = str(exc) or type(exc).__name__  # the bare message, as Mastra sends it to the model
            log.info("tool raised", tool=name, error=error, exc_type=type(exc).__name__)
    await _after(hooks, hook_ctx, output, error)
    return output, error


def tool_error_name(error: str, tool_name: str, tools: dict[str, Tool]) -> str:
    """A ``tool-error``'s ``error.name``, from the stored text (a resumed step emits the chunk
    again from it): ``ToolNotFoundError`` for a tool the agent does not have,
    ``ToolTimeoutError`` for a call past its deadline (decision 218), else ``Error`` (decision 144)."""
    if error == unknown_tool_error(tool_name, tools):
        return "ToolNotFoundError"
    if re.fullmatch(rf"tool {re.escape(tool_name)} timed out after [0-9.e+-]+ s", error):
        return "ToolTimeoutError"
    return "Error"


def unknown_tool_error(name: str, tools: dict[str, Tool]) -> str:
    """The error text of a call to a tool the agent does not have, worded as Mastra's (the model
    reads it as the call's result)."""
    available = ", ".join(tools) or "none"
    return (f'Tool "{name}" not found. Available tools: {available}. Call tools by their exact name only '
            "\u2014 never add prefixes, namespaces, or colons.")


async def _after(hooks: ToolHooks, ctx: AttrDict, output: object, error: str | None) -> None:
    if hooks.after_tool_call is None:
        return
    ctx["output"] = output
    ctx["error"] = error
    await call_user(hooks.after_tool_call, ctx)


def set_invocation(ml: MessageList, message_id: str, call_id: str, **fields: object) -> AttrDict | None:
    """Update the ``tool-invocation`` part of ``call_id`` in the response message; return it."""
    msg = ml.get_by_id(message_id)
    if msg is None:
        return None
    for part in msg["content"]["parts"]:
        if part.get("type") == "tool-invocation" and part["toolInvocation"]["toolCallId"] == call_id:
            invocation: AttrDict = part["toolInvocation"]
            invocation.update(fields)
            return invocation
    return None


def _set_part_metadata(ml: MessageList, message_id: str, call_id: str, metadata: JSONObject) -> None:
    """Set ``providerMetadata`` of the ``tool-invocation`` part of ``call_id`` (as Mastra stores it)."""
    msg = ml.get_by_id(message_id)
    for part in msg["content"]["parts"] if msg is not None else ():
        if part.get("type") == "tool-invocation" and part["toolInvocation"]["toolCallId"] == call_id:
            part["providerMetadata"] = metadata


def read_result(ml: MessageList, call_id: str) -> tuple[bool, JSONValue]:
    """Newest ``result``-state invocation of ``call_id`` (after ``update_tool_invocation``)."""
    for msg in reversed(ml.get.all.db()):
        for part in msg["content"].get("parts") or ():
            inv = part.get("toolInvocation") if part.get("type") == "tool-invocation" else None
            if inv and inv.get("toolCallId") == call_id and inv.get("state") == "result":
                return True, inv.get("result")
    return False, None

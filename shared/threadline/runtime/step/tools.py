"""Executing one tool call: hooks around it, ``process_tool_result`` after it, the result into
the message list and onto the stream (Mastra's Agent API "Tool hook", docs/processors.md ``processToolResult``)."""

from __future__ import annotations

from typing import Any

from threadline._internal.attrdict import AttrDict, wrap
from threadline._internal.usercode import call_user
from threadline.logging import get_logger
from threadline.runtime.messages import MessageList
from threadline.runtime.tools import Tool, ToolContext, ToolHooks
from threadline.text import clean_json, clean_text

log = get_logger(__name__)


async def run_tool_call(*, call: dict[str, Any], tools: dict[str, Tool], hooks: ToolHooks,
                        context: ToolContext, agent_meta: dict[str, Any]) -> tuple[Any, str | None]:
    """Run one call with its hooks. Returns ``(result, error_text)``; ``error_text`` is set when
    the tool is unknown, its input invalid, or it raised (then ``result`` is ``None``). U+0000 and
    lone surrogate halves in the result and the error text are replaced by U+FFFD (decision 18)."""
    output, error = await _run(call=call, tools=tools, hooks=hooks, context=context, agent_meta=agent_meta)
    return clean_json(output), (clean_text(error) if error is not None else None)


async def _run(*, call: dict[str, Any], tools: dict[str, Tool], hooks: ToolHooks,
               context: ToolContext, agent_meta: dict[str, Any]) -> tuple[Any, str | None]:
    name, args = call["toolName"], call.get("args") or {}
    hook_ctx = wrap({"tool_name": name, "toolName": name, "input": args,
                     "context": {"tool_call_id": call["toolCallId"], "run_id": context.run_id,
                                 "thread_id": context.thread_id, "resource_id": context.resource_id},
                     "metadata": agent_meta})
    if hooks.before_tool_call is not None:
        decision = await call_user(hooks.before_tool_call, hook_ctx)
        if isinstance(decision, dict) and decision.get("proceed") is False:
            output = decision.get("output")
            await _after(hooks, hook_ctx, output, None)
            return output, None
    tool = tools.get(name)
    output = None
    error: str | None = None
    if tool is None:
        error = f"unknown tool {name!r}"
    else:
        try:
            output = await tool.run(args, context)
        except Exception as exc:
            if getattr(exc, "interrupts_step", False):  # a workflow lost its step or journal (decision 81)
                raise
            error = f"{type(exc).__name__}: {exc}"
            log.info("tool raised", tool=name, error=error)
    await _after(hooks, hook_ctx, output, error)
    return output, error


async def _after(hooks: ToolHooks, ctx: AttrDict, output: Any, error: str | None) -> None:
    if hooks.after_tool_call is None:
        return
    ctx["output"] = output
    ctx["error"] = error
    await call_user(hooks.after_tool_call, ctx)


def set_invocation(ml: MessageList, message_id: str, call_id: str, **fields: Any) -> AttrDict | None:
    """Update the ``tool-invocation`` part of ``call_id`` in the response message; return it."""
    msg = ml.get_by_id(message_id)
    if msg is None:
        return None
    for part in msg["content"]["parts"]:
        if part.get("type") == "tool-invocation" and part["toolInvocation"]["toolCallId"] == call_id:
            part["toolInvocation"].update(fields)
            return part["toolInvocation"]
    return None


def read_result(ml: MessageList, call_id: str) -> tuple[bool, Any]:
    """Newest ``result``-state invocation of ``call_id`` (after ``update_tool_invocation``)."""
    for msg in reversed(ml.get.all.db()):
        for part in msg["content"].get("parts") or ():
            inv = part.get("toolInvocation") if part.get("type") == "tool-invocation" else None
            if inv and inv.get("toolCallId") == call_id and inv.get("state") == "result":
                return True, inv.get("result")
    return False, None

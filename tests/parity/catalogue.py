"""The Threadline side of the parity catalogue: every processor behaviour and tool that
``tests/parity/scenarios.json`` names, written against Threadline's interfaces.

``tests/parity/catalogue.mjs`` implements the same behaviours against @mastra/core's; each
entry here follows the description in ``tests/parity/README.md`` and its JavaScript twin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from threadline.examples.support import WordCounter  # the demo's processor, as Mastra's docs write it
from threadline.runtime import Processor, create_tool


def _text(message: Any) -> str:
    return " ".join(p.get("text", "") for p in message["content"]["parts"] if p.get("type") == "text")


def _with_text(message: Any, fn: Callable[[str], str]) -> dict[str, Any]:
    content = dict(message["content"])
    content["parts"] = [{**p, "text": fn(p["text"])} if p.get("type") == "text" else p for p in content["parts"]]
    if isinstance(content.get("content"), str):
        content["content"] = fn(content["content"])
    return {**message, "content": content}


class BlockWord(Processor):
    id = "block-word"

    def __init__(self, word: str) -> None:
        self.word = word

    def process_input(self, *, messages: Any, abort: Any, **_: Any) -> Any:
        for m in messages:
            if m["role"] == "user" and self.word in _text(m).lower():
                abort(f"Blocked word: {self.word}", metadata={"word": self.word})
        return messages


class PrefixUser(Processor):
    id = "prefix-user"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def process_input(self, *, messages: Any, **_: Any) -> Any:
        last = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        return [_with_text(m, lambda t: self.prefix + t) if i == last else m for i, m in enumerate(messages)]


class AddSystem(Processor):
    id = "add-system"

    def __init__(self, text: str) -> None:
        self.text = text

    def process_input(self, *, messages: Any, system_messages: Any, **_: Any) -> Any:
        return {"messages": messages, "system_messages": [*system_messages, {"role": "system", "content": self.text}]}


class InputRetry(Processor):
    id = "input-retry"

    def process_input(self, *, messages: Any, abort: Any, retry_count: int, **_: Any) -> Any:
        if retry_count == 0:
            abort("retry from input", retry=True)
        return messages


class StepSystem(Processor):
    id = "step-system"

    def __init__(self, text: str, step: int = 0) -> None:
        self.text, self.step = text, step

    def process_input_step(self, *, step_number: int, system_messages: Any, **_: Any) -> Any:
        if step_number == self.step:
            return {"system_messages": [*system_messages, {"role": "system", "content": self.text}]}
        return None


class StepOverride(Processor):
    id = "step-override"

    def __init__(self, override: dict[str, Any], step: int = 0) -> None:
        self.override, self.step = override, step

    def process_input_step(self, *, step_number: int, **_: Any) -> Any:
        if step_number != self.step:
            return None
        out = dict(self.override)
        if "model" in out:
            out["model"] = f"openai/{out['model']}"
        if "structuredOutput" in out:
            out["structuredOutput"] = {"schema": SCHEMAS[out["structuredOutput"]["schema"]]}
        return out


class StepAbort(Processor):
    id = "step-abort"

    def __init__(self, step: int = 0) -> None:
        self.step = step

    def process_input_step(self, *, step_number: int, abort: Any, **_: Any) -> Any:
        if step_number == self.step:
            abort("stopped before the step", metadata={"step": self.step})
        return None


class RequestNote(Processor):
    id = "request-note"

    def __init__(self, text: str) -> None:
        self.text = text

    def process_llm_request(self, *, prompt: Any, **_: Any) -> Any:
        return {"prompt": [*prompt, {"role": "user", "content": self.text}]}


class RequestCache(Processor):
    id = "request-cache"

    def __init__(self, text: str) -> None:
        self.text = text

    def process_llm_request(self, **_: Any) -> Any:
        words = self.text.split(" ")
        return {"response": {"chunks": [{"type": "text-delta", "payload": {
            "id": "txt-0", "text": w + " " if i < len(words) - 1 else w}} for i, w in enumerate(words)]}}


class ResponseReport(Processor):
    id = "response-report"

    async def process_llm_response(self, *, chunks: Any, from_cache: bool, step_number: int, writer: Any,
                                   **_: Any) -> None:
        await writer.custom({"type": "data-llm-response", "data": {
            "stepNumber": step_number, "fromCache": from_cache, "types": [c["type"] for c in chunks]}})


class ContextReport(Processor):
    id = "context-report"

    def __init__(self, key: str) -> None:
        self.key = key

    async def process_output_stream(self, *, part: Any, request_context: Any, writer: Any, **_: Any) -> Any:
        if part.type == "finish":
            await writer.custom({"type": "data-context", "data": {self.key: (request_context or {}).get(self.key)}})
        return part


class UpperStream(Processor):
    id = "upper-stream"

    async def process_output_stream(self, *, part: Any, **_: Any) -> Any:
        if part.type == "text-delta":
            part.payload.text = part.payload.text.upper()
        return part


class DropWord(Processor):
    id = "drop-word"

    def __init__(self, word: str) -> None:
        self.word = word

    async def process_output_stream(self, *, part: Any, **_: Any) -> Any:
        if part.type == "text-delta" and self.word in part.payload.text:
            return None
        return part


class AbortStream(Processor):
    id = "abort-stream"

    def __init__(self, word: str, retry: bool = False) -> None:
        self.word, self.retry = word, retry

    async def process_output_stream(self, *, part: Any, abort: Any, retry_count: int, **_: Any) -> Any:
        if part.type == "text-delta" and self.word in part.payload.text and (not self.retry or retry_count == 0):
            abort(f"no {self.word}", retry=self.retry, metadata={"word": self.word})
        return part


class PartsSeen(Processor):
    id = "parts-seen"

    async def process_output_stream(self, *, part: Any, stream_parts: Any, writer: Any, **_: Any) -> Any:
        if part.type == "finish":
            await writer.custom({"type": "data-parts-seen", "data": {"types": [p.type for p in stream_parts]}})
        return part


class RetryUnless(Processor):
    id = "retry-unless"

    def __init__(self, word: str, metadata: Any = None, times: int = 1) -> None:
        self.word, self.metadata, self.times = word, metadata, times

    def process_output_step(self, *, text: str, abort: Any, retry_count: int, messages: Any, **_: Any) -> Any:
        if self.word not in (text or "") and retry_count < self.times:
            abort("add detail", retry=True, metadata=self.metadata)
        return messages


class StepGuard(Processor):
    id = "step-guard"

    def __init__(self, word: str) -> None:
        self.word = word

    def process_output_step(self, *, text: str, abort: Any, messages: Any, **_: Any) -> Any:
        if self.word in (text or ""):
            abort(f"step mentions {self.word}", metadata={"word": self.word})
        return messages


class StepReport(Processor):
    id = "step-report"

    async def process_output_step(self, *, step_number: int, finish_reason: str, tool_calls: Any, text: str,
                                  retry_count: int, writer: Any, messages: Any, **_: Any) -> Any:
        names = [c.get("toolName") or c.get("tool_name") for c in tool_calls or []]
        await writer.custom({"type": "data-step-report", "data": {
            "stepNumber": step_number, "finishReason": finish_reason, "text": text or "",
            "retryCount": retry_count, "toolCalls": names}})
        return messages


class ResultUpper(Processor):
    id = "result-upper"

    def process_output_result(self, *, messages: Any, **_: Any) -> Any:
        return [_with_text(m, str.upper) if m["role"] == "assistant" else m for m in messages]


class ResultAbort(Processor):
    id = "result-abort"

    def process_output_result(self, *, abort: Any, **_: Any) -> Any:
        abort("final answer rejected")


class ToolResultAbort(Processor):
    id = "tool-result-abort"

    def __init__(self, tool: str) -> None:
        self.tool = tool

    def process_tool_result(self, *, tool_name: str, abort: Any, **_: Any) -> Any:
        if tool_name == self.tool:
            abort(f"{self.tool} result not allowed")


class ApiErrorRetry(Processor):
    id = "api-error-retry"

    def __init__(self, times: int = 1) -> None:
        self.times = times

    def process_api_error(self, *, retry_count: int, **_: Any) -> Any:
        return {"retry": retry_count < self.times}


PROCESSORS: dict[str, Callable[..., Processor]] = {
    "block-word": BlockWord, "prefix-user": PrefixUser, "add-system": AddSystem, "input-retry": InputRetry,
    "step-system": StepSystem, "step-override": StepOverride, "step-abort": StepAbort,
    "request-note": RequestNote, "request-cache": RequestCache, "response-report": ResponseReport,
    "context-report": ContextReport, "upper-stream": UpperStream,
    "drop-word": DropWord, "abort-stream": AbortStream, "word-counter": WordCounter, "parts-seen": PartsSeen,
    "retry-unless": RetryUnless, "step-guard": StepGuard, "step-report": StepReport,
    "result-upper": ResultUpper, "result-abort": ResultAbort, "tool-result-abort": ToolResultAbort,
    "api-error-retry": ApiErrorRetry,
}
"""Each catalogue name, as a factory taking the scenario's ``args``."""


class Forecast(BaseModel):
    city: str
    celsius: float


SCHEMAS: dict[str, type[BaseModel]] = {"forecast": Forecast}

CUSTOMERS = {
    "C-1001": {"id": "C-1001", "name": "Ada Lovelace", "plan": "pro", "open_tickets": 2},
    "C-1002": {"id": "C-1002", "name": "Alan Turing", "plan": "free", "open_tickets": 0},
}


class LookupInput(BaseModel):
    customer_id: str = Field(description="Customer id, e.g. C-1001")


class AddInput(BaseModel):
    a: float
    b: float


class NoInput(BaseModel):
    pass


async def _lookup(input: LookupInput) -> dict[str, Any]:
    return CUSTOMERS.get(input.customer_id, {"error": f"no customer {input.customer_id}"})


async def _add(input: AddInput) -> dict[str, Any]:
    total = input.a + input.b
    return {"sum": int(total) if total.is_integer() else total}


async def _fail(input: NoInput) -> dict[str, Any]:
    raise RuntimeError("tool failed on purpose")


async def _progress(input: NoInput, context: Any) -> dict[str, Any]:
    await context.writer.custom({"type": "data-progress", "data": {"pct": 100}})
    return {"done": True}


TOOLS = {
    "lookup_customer": lambda: create_tool(
        id="lookup_customer", description="Look up a customer's plan and open tickets by customer id.",
        input_schema=LookupInput, execute=_lookup),
    "add": lambda: create_tool(id="add", description="Add two numbers.", input_schema=AddInput, execute=_add),
    "add_approved": lambda: create_tool(id="add_approved", description="Add two numbers, once a person approves.",
                                        input_schema=AddInput, execute=_add, require_approval=True),
    "fail_tool": lambda: create_tool(id="fail_tool", description="Always fails.", input_schema=NoInput, execute=_fail),
    "progress": lambda: create_tool(id="progress", description="Reports progress, then returns.",
                                    input_schema=NoInput, execute=_progress),
}
"""Each catalogue tool, as a factory."""


def _skip_tool(tool: str, output: Any) -> dict[str, Any]:
    """beforeToolCall: skip ``tool`` and answer ``output`` instead."""
    return {"before_tool_call": lambda ctx: {"proceed": False, "output": output} if ctx.tool_name == tool else None}


def _stamp_agent() -> dict[str, Any]:
    """afterToolCall: stamp the agent's name (hook metadata) on an object result."""
    def after(ctx: Any) -> None:
        if isinstance(ctx["output"], dict):
            ctx["output"]["seenBy"] = ctx["metadata"].get("agent_name")
    return {"after_tool_call": after}


HOOKS: dict[str, Callable[..., dict[str, Any]]] = {"skip-tool": _skip_tool, "stamp-agent": _stamp_agent}

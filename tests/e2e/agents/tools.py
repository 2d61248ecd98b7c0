"""Agents whose tools are under test: results and data parts through the output processors,
gates before side effects, tool hooks (agent- and call-level), active tools, failing tools, big
results. Side effects are rows in PostgreSQL, which the tests read back."""

from __future__ import annotations

from typing import Any

import asyncpg
from pydantic import BaseModel, Field

from threadline.config import get_settings
from threadline.examples.support import lookup_customer_tool
from threadline.runtime import Agent, Processor, create_tool


async def _execute(*statements: tuple[str, tuple[Any, ...]]) -> None:
    """Run ``(sql, args)`` statements in order on one connection to the services' database."""
    conn = await asyncpg.connect(get_settings().pg_dsn)
    try:
        for sql, args in statements:
            await conn.execute(sql, *args)
    finally:
        await conn.close()


# --- tool results and tool-written data chunks go through the output processors -------------------
class LookupInput(BaseModel):
    id: str


async def lookup_customer(input: LookupInput, context: Any) -> dict[str, Any]:
    await context.writer.custom({"type": "data-progress", "data": {"pct": 50}, "transient": True})
    await context.writer.custom({"type": "data-progress", "data": {"pct": 100}, "transient": True})
    return {"name": "Ann", "ssn": "123-45-6789", "email": "a@b.c"}


class RedactToolResult(Processor):
    """Replaces the customer's SSN and e-mail in the stored tool result."""

    id = "redact"

    async def process_tool_result(self, *, tool_name, tool_call_id, args, result, message_list, **_):
        if tool_name != "lookup_customer":
            return
        message_list.update_tool_invocation({"type": "tool-invocation", "toolInvocation": {
            "state": "result", "toolCallId": tool_call_id, "toolName": tool_name, "args": args,
            "result": {**result, "ssn": "[REDACTED]", "email": "[REDACTED]"}}})


class HideEarlyProgress(Processor):
    """Sees data parts (``process_data_parts``), counts part types, drops progress under 100 %."""

    id = "watch"
    process_data_parts = True

    async def process_output_stream(self, *, part, state, **_):
        counts = state.setdefault("counts", {})
        counts[part.type] = counts.get(part.type, 0) + 1
        if part.type == "data-progress" and part.data["pct"] < 100:
            return None
        return part


class RecordPartTypes(Processor):
    """Records the part types it is shown (no data parts: it does not ask for them)."""

    id = "plain"

    async def process_output_stream(self, *, part, state, **_):
        state.setdefault("types", []).append(part.type)
        return part


redacting_tools = Agent(id="redacting-tools", model="openai/threadline-redacting-tools",
                        tools=[create_tool(id="lookup_customer", description="look up", input_schema=LookupInput,
                                           execute=lookup_customer)],
                        output_processors=[RedactToolResult(), HideEarlyProgress(), RecordPartTypes()])


# --- gating before side effects ---------------------------------------------------------------------
class EmailInput(BaseModel):
    to: str


async def send_email(input: EmailInput, context: Any) -> dict[str, Any]:
    """The side effect: one ``sent_emails`` row per execution."""
    await _execute(("CREATE TABLE IF NOT EXISTS sent_emails (run_id text, recipient text)", ()),
                   ("INSERT INTO sent_emails VALUES ($1, $2)", (context.run_id, input.to)))
    return {"sent": True}


email_tool = create_tool(id="send_email", description="send an email", input_schema=EmailInput, execute=send_email)


class SlowInputGate(Processor):
    """Blocks every input, after half a second (no model call may start meanwhile)."""

    id = "slowgate"

    async def process_input(self, *, abort, **_):
        import asyncio

        await asyncio.sleep(0.5)
        abort("blocked topic")


class BlockEmailStep(Processor):
    """Blocks a step whose tool calls include ``send_email`` (before the tool runs)."""

    id = "stepgate"

    def process_output_step(self, *, tool_calls, abort, **_):
        if any(c.toolName == "send_email" for c in tool_calls or []):
            abort("no emails")


async def record_hook(ctx: Any) -> None:
    """``before_tool_call``: one ``hook_calls`` row per call."""
    await _execute(("CREATE TABLE IF NOT EXISTS hook_calls (tool text)", ()),
                   ("INSERT INTO hook_calls VALUES ($1)", (ctx.tool_name,)))


input_gated_mailer = Agent(id="input-gated-mailer", model="openai/threadline-gated-mailer", tools=[email_tool],
                           input_processors=[SlowInputGate()], hooks={"before_tool_call": record_hook})
step_gated_mailer = Agent(id="step-gated-mailer", model="openai/threadline-gated-mailer", tools=[email_tool],
                          output_processors=[BlockEmailStep()], hooks={"before_tool_call": record_hook})
mailer = Agent(id="mailer", model="openai/threadline-mailer", tools=[email_tool])


# --- a tool-call step whose stream says "stop"; usage missing or late -------------------------------
class AddInput(BaseModel):
    a: int
    b: int


adder = Agent(id="adder", model="openai/threadline-adder", default_options={"max_steps": 3},
              tools=[create_tool(id="add", description="add two numbers", input_schema=AddInput,
                                 execute=lambda i: i.a + i.b)])


# --- tools added by a processor still run under the hooks; call-level hooks -------------------------
class AddsTool(Processor):
    """Adds ``secret_tool`` in ``process_input_step``."""

    id = "adds-tool"

    def process_input_step(self, *, tools, **_):
        extra = create_tool(id="secret_tool", description="added at run time", execute=lambda i: {"ok": True})
        return {"tools": {**(tools or {}), "secret_tool": extra}}


async def audit_hook(ctx: Any) -> None:
    """The agent's ``before_tool_call``: one ``hook_audit`` row per call."""
    hook = "agent" if "agent" in str(ctx.metadata) else "x"
    await _execute(("CREATE TABLE IF NOT EXISTS hook_audit (hook text, tool text)", ()),
                   ("INSERT INTO hook_audit VALUES ($1, $2)", (hook, ctx.tool_name)))


async def call_hook(ctx: Any) -> dict[str, Any]:
    """A call-level ``before_tool_call`` that records the call and refuses it."""
    await _execute(("CREATE TABLE IF NOT EXISTS hook_audit (hook text, tool text)", ()),
                   ("INSERT INTO hook_audit VALUES ('call', $1)", (ctx.tool_name,)))
    return {"proceed": False, "output": {"blocked": True}}


hooked = Agent(id="hooked", model="openai/threadline-hooked", input_processors=[AddsTool()],
               hooks={"before_tool_call": audit_hook})
hooks = {"blocking": {"before_tool_call": call_hook}}
"""Hooks named by call-level options (``hooks: "blocking"``)."""


# --- data parts written by tools; active tools; a tool result that aborts; a tool that raises -------
class DataInput(BaseModel):
    n: int


async def data_tool(input: DataInput, context: Any) -> dict[str, Any]:
    await context.writer.custom({"type": "data-progress", "data": {"p": 1}})
    await context.writer.custom({"type": "data-secret", "data": {"s": 1}})
    await context.writer.custom({"type": "data-note", "data": 1, "transient": True})
    return {"n": input.n}


class DropSecret(Processor):
    """Drops ``data-secret`` parts (not streamed, not stored)."""

    id = "drop-secret"
    process_data_parts = True

    async def process_output_stream(self, *, part, **_):
        return None if part.type == "data-secret" else part


class OfferTwoTools(Processor):
    """Sets the active tools to ``tool_a`` and ``tool_b`` (``prepare_step`` narrows them after)."""

    id = "only-a"

    def process_input_step(self, **_):
        return {"active_tools": ["tool_a", "tool_b"]}


def prepare_step(*, step_number, **_):
    return {"active_tools": ["tool_b"]}


class BlockFirstToolResult(Processor):
    """Aborts on the result of tool call ``t1``."""

    id = "block-t1"

    def process_tool_result(self, *, tool_call_id, abort, **_):
        if tool_call_id == "t1":
            abort("t1 result not allowed")


class RecordToolResults(Processor):
    """Records the tools whose results it is shown."""

    id = "recorder"

    def process_tool_result(self, *, tool_name, state, **_):
        state.setdefault("results", []).append(tool_name)


def _echo_tool(name: str):
    return create_tool(id=name, description=name, execute=lambda i: {"tool": name})


def _explode(_input: Any) -> None:
    raise RuntimeError("tool broke")


data_agent = Agent(id="data-agent", model="openai/threadline-data", output_processors=[DropSecret()],
                   tools=[create_tool(id="data_tool", description="d", input_schema=DataInput, execute=data_tool)])
active_agent = Agent(id="active-agent", model="openai/threadline-active", input_processors=[OfferTwoTools()],
                     tools=[_echo_tool("tool_a"), _echo_tool("tool_b")], default_options={"prepare_step": prepare_step})
tool_result_gate = Agent(id="tool-result-gate", model="openai/threadline-tool-result-gate",
                         output_processors=[BlockFirstToolResult()], tools=[_echo_tool("tool_a")])
raising = Agent(id="raising", model="openai/threadline-raising", output_processors=[RecordToolResults()],
                tools=[create_tool(id="boom", description="fails", execute=_explode), _echo_tool("fine")])


# --- big tool results; one model script queue per run (concurrent runs behind PgBouncer) ------------
class BlobInput(BaseModel):
    size: int = Field(description="bytes of text to return")


async def make_blob(input: BlobInput, context: Any) -> dict[str, Any]:
    """A big tool result: ``size`` characters cycling through the alphabet and digits."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return {"blob": (alphabet * (input.size // len(alphabet) + 1))[:input.size]}


_blob_tool = create_tool(id="make_blob", description="return a big text", input_schema=BlobInput, execute=make_blob)
# The model is chosen per run from the request context, so concurrent runs each take their own
# script queue (``threadline-pooled-<n>``).
pooled_agent = Agent(id="pooled-agent", model=lambda ctx: f"openai/threadline-pooled-{ctx.get('n', 'x')}",
                     tools=[lookup_customer_tool, _blob_tool])

agents = [redacting_tools, input_gated_mailer, step_gated_mailer, mailer, adder, hooked, data_agent, active_agent,
          tool_result_gate, raising, pooled_agent]

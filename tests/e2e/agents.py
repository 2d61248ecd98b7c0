"""Agents of the end-to-end tests (loaded by the services as ``tests.e2e.agents``).

Each case agent has its own model name, so the fake model's scripts of one test never reach
another agent. Processors record what they saw in their ``state`` (stored with the run).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from threadline.examples.support import support_agent
from threadline.runtime import Agent, Processor, create_tool

echo_agent = Agent(id="echo-agent", instructions="Repeat what the user says.", model="openai/threadline-echo")


# --- C01: an abort swallowed by the processor's own `except` --------------------------------
class Scrub(Processor):
    id = "scrub"

    async def process_output_stream(self, *, part, abort, **_):
        try:
            if part.type == "text-delta" and "SYSTEM PROMPT:" in part.payload.text:
                abort("system prompt leak", metadata={"rule": "sp-1"})
        except Exception:  # "fail open"
            return part
        return part


class Tail(Processor):
    id = "tail"

    async def process_output_stream(self, *, part, state, **_):
        state.setdefault("parts", []).append({"type": part.type, "payload": part.payload})
        return part


a1 = Agent(id="a1", model="openai/threadline-a1", output_processors=[Scrub(), Tail()])


# --- C03: tripwire in process_input -------------------------------------------------------------
class Pii(Processor):
    id = "pii"

    def process_input(self, *, messages, message_list, abort, **_):
        for m in message_list.get.input.db():  # the new input (``messages`` also holds the history)
            if m.role == "user" and any("@" in (p.text or "") for p in m.content.parts if p.type == "text"):
                abort("PII in input", metadata={"category": "pii"})
        return messages


a3 = Agent(id="a3", model="openai/threadline-a3", input_processors=[Pii()])


# --- C05: retry budgets -------------------------------------------------------------------------
class AlwaysRetry(Processor):
    id = "ar"

    def process_api_error(self, *, error, retry_count, state, **_):
        state.setdefault("seen", []).append(retry_count)
        state.setdefault("kinds", []).append(error.kind)
        return {"retry": True}


class RetryStep(Processor):
    id = "q"

    def process_output_step(self, *, abort, **_):
        abort("try again", retry=True)


a5 = Agent(id="a5", model="openai/threadline-a5", error_processors=[AlwaysRetry()])
a5c = Agent(id="a5c", model="openai/threadline-a5c", output_processors=[RetryStep()])


# --- C07: tool results and tool-written data chunks go through the output processors ------------
class LookupInput(BaseModel):
    id: str


async def lookup_customer(input: LookupInput, context: Any) -> dict[str, Any]:
    await context.writer.custom({"type": "data-progress", "data": {"pct": 50}, "transient": True})
    await context.writer.custom({"type": "data-progress", "data": {"pct": 100}, "transient": True})
    return {"name": "Ann", "ssn": "123-45-6789", "email": "a@b.c"}


class Redact(Processor):
    id = "redact"

    async def process_tool_result(self, *, tool_name, tool_call_id, args, result, message_list, **_):
        if tool_name != "lookup_customer":
            return
        message_list.update_tool_invocation({"type": "tool-invocation", "toolInvocation": {
            "state": "result", "toolCallId": tool_call_id, "toolName": tool_name, "args": args,
            "result": {**result, "ssn": "[REDACTED]", "email": "[REDACTED]"}}})


class Watch(Processor):
    id = "watch"
    process_data_parts = True

    async def process_output_stream(self, *, part, state, **_):
        counts = state.setdefault("counts", {})
        counts[part.type] = counts.get(part.type, 0) + 1
        if part.type == "data-progress" and part.data["pct"] < 100:
            return None
        return part


class Plain(Processor):
    id = "plain"

    async def process_output_stream(self, *, part, state, **_):
        state.setdefault("types", []).append(part.type)
        return part


a7 = Agent(id="a7", model="openai/threadline-a7",
           tools=[create_tool(id="lookup_customer", description="look up", input_schema=LookupInput,
                              execute=lookup_customer)],
           output_processors=[Redact(), Watch(), Plain()])


# --- C14: errors inside a 200 stream; processors never see raw errors ----------------------------
class Rl(Processor):
    id = "rl"

    def process_api_error(self, *, error, retry_count, state, **_):
        state.setdefault("errors", []).append({"kind": error.kind, "status": error.status_code,
                                               "retry_count": retry_count})
        return {"retry": error.kind == "rate_limit" and retry_count == 0}


class Obs(Processor):
    id = "obs"

    async def process_output_stream(self, *, part, state, **_):
        state.setdefault("types", []).append(part.type)
        return part

    async def process_output_result(self, *, result, state, **_):
        state.setdefault("results", []).append(result.finishReason)


a14 = Agent(id="a14", model="openai/threadline-a14", error_processors=[Rl()], output_processors=[Obs()])
a14c = Agent(id="a14c", model="openai/threadline-a14c", output_processors=[Obs()])

# --- processor state carried across steps that run on different workers --------------------------
class ChunkCounter(Processor):
    id = "chunk-counter"

    async def process_output_stream(self, *, part, state, **_):
        state["count"] = state.get("count", 0) + 1
        return part

    async def process_output_step(self, *, step_number, state, **_):
        state.setdefault("per_step", []).append([step_number, state.get("count", 0)])


class SlowInput(BaseModel):
    seconds: float


async def slow(input: SlowInput) -> dict[str, Any]:
    import asyncio

    await asyncio.sleep(input.seconds)
    return {"slept": input.seconds}


stateful = Agent(id="stateful", model="openai/threadline-stateful", output_processors=[ChunkCounter()],
                 tools=[create_tool(id="slow", description="sleeps", input_schema=SlowInput, execute=slow)])

# --- C09: input filtering must not rewrite stored history -----------------------------------------
class NoTools(Processor):
    id = "notools"

    def process_input(self, *, messages, **_):
        out = []
        for m in messages:
            parts = [p for p in m.content.parts if p.type != "tool-invocation"]
            out.append({**m, "content": {**m.content, "parts": parts}})
        return out


a9 = Agent(id="a9", model="openai/threadline-a9", input_processors=[NoTools()])


# --- C10: gating before side effects ---------------------------------------------------------------
SENT_EMAILS: list[dict[str, Any]] = []  # lives in the worker process; the test reads the tool's rows


class EmailInput(BaseModel):
    to: str


async def send_email(input: EmailInput, context: Any) -> dict[str, Any]:
    import asyncpg

    from threadline.config import get_settings

    conn = await asyncpg.connect(get_settings().pg_dsn)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS sent_emails (run_id text, recipient text)")
        await conn.execute("INSERT INTO sent_emails VALUES ($1, $2)", context.run_id, input.to)
    finally:
        await conn.close()
    return {"sent": True}


class SlowGate(Processor):
    id = "slowgate"

    async def process_input(self, *, abort, **_):
        import asyncio

        await asyncio.sleep(0.5)
        abort("blocked topic")


class StepGate(Processor):
    id = "stepgate"

    def process_output_step(self, *, tool_calls, abort, **_):
        if any(c.toolName == "send_email" for c in tool_calls or []):
            abort("no emails")


async def record_hook(ctx: Any) -> None:
    import asyncpg

    from threadline.config import get_settings

    conn = await asyncpg.connect(get_settings().pg_dsn)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS hook_calls (tool text)")
        await conn.execute("INSERT INTO hook_calls VALUES ($1)", ctx.tool_name)
    finally:
        await conn.close()


_email_tool = create_tool(id="send_email", description="send an email", input_schema=EmailInput, execute=send_email)
a10a = Agent(id="a10a", model="openai/threadline-a10", tools=[_email_tool], input_processors=[SlowGate()],
             hooks={"before_tool_call": record_hook})
a10b = Agent(id="a10b", model="openai/threadline-a10", tools=[_email_tool], output_processors=[StepGate()],
             hooks={"before_tool_call": record_hook})


# --- C13: a tool-call step whose stream says "stop"; usage missing or late ---------------------------
class AddInput(BaseModel):
    a: int
    b: int


a13 = Agent(id="a13", model="openai/threadline-a13", default_options={"max_steps": 3},
            tools=[create_tool(id="add", description="add two numbers", input_schema=AddInput,
                               execute=lambda i: i.a + i.b)])

support = support_agent
agents = [a9, a10a, a10b, a13, echo_agent, support, a1, a3, a5, a5c, a7, a14, a14c, stateful]


# --- chunk and memory vectors (C1, C2, C5, C8, M1, P29) ---------------------------------------------
class Cache(Processor):
    """Replays a cached response instead of calling the model (DECISIONS 7)."""

    id = "cache"

    def process_llm_request(self, **_):
        return {"response": {"chunks": [{"type": "text-delta", "payload": {"id": "t0", "text": "cached "}},
                                        {"type": "text-delta", "payload": {"id": "t0", "text": "answer"}}]}}

    def process_llm_response(self, *, from_cache, state, **_):
        state.setdefault("from_cache", []).append(from_cache)


class Upper(Processor):
    id = "upper"

    async def process_output_stream(self, *, part, **_):
        if part.type == "text-delta":
            part.payload.text = part.payload.text.upper()
        return part


vectors = Agent(id="vectors", model="openai/threadline-vectors")
cached = Agent(id="cached", model="openai/threadline-cached", input_processors=[Cache()], output_processors=[Upper()])
agents += [vectors, cached]


def _broken_instructions(request_context):
    raise RuntimeError("instructions exploded")


broken = Agent(id="broken", model="openai/threadline-broken", instructions=_broken_instructions)
agents += [broken]

a4 = Agent(id="a4", model="openai/threadline-a4")
agents += [a4]

a18 = Agent(id="a18", model="openai/threadline-a18")
agents += [a18]


# --- retry feedback (P21), processor-added tools under hooks (item 14), call-level lists (item 13) ----
class TooShort(Processor):
    id = "too-short"

    def process_output_step(self, *, text, retry_count, abort, state, **_):
        state.setdefault("retry_counts", []).append(retry_count)
        if len(text) < 10:
            abort("too short", retry=True)


class AddsTool(Processor):
    id = "adds-tool"

    def process_input_step(self, *, tools, **_):
        extra = create_tool(id="secret_tool", description="added at run time", execute=lambda i: {"ok": True})
        return {"tools": {**(tools or {}), "secret_tool": extra}}


class Shout(Upper):
    id = "shout"


async def audit_hook(ctx):
    import asyncpg

    from threadline.config import get_settings

    conn = await asyncpg.connect(get_settings().pg_dsn)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS hook_audit (hook text, tool text)")
        await conn.execute("INSERT INTO hook_audit VALUES ($1, $2)", "agent" if "agent" in str(ctx.metadata) else "x",
                           ctx.tool_name)
    finally:
        await conn.close()


async def call_hook(ctx):
    import asyncpg

    from threadline.config import get_settings

    conn = await asyncpg.connect(get_settings().pg_dsn)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS hook_audit (hook text, tool text)")
        await conn.execute("INSERT INTO hook_audit VALUES ('call', $1)", ctx.tool_name)
    finally:
        await conn.close()
    return {"proceed": False, "output": {"blocked": True}}


retrying = Agent(id="retrying", model="openai/threadline-retrying", output_processors=[TooShort()],
                 max_processor_retries=2)
hooked = Agent(id="hooked", model="openai/threadline-hooked", input_processors=[AddsTool()],
               hooks={"before_tool_call": audit_hook})
agents += [retrying, hooked]
processors = [Shout()]                      # call-level lists name these by id
hooks = {"blocking": {"before_tool_call": call_hook}}


# --- more vectors: data parts (P18–P20, M5), prompt edits (P30), system reset (P6, M7), ---------------
# --- prepare_step + active tools (P9), tool-result abort (P33), output-result abort (P38, M6) ----------
class DataTool(BaseModel):
    n: int


async def data_tool(input: DataTool, context: Any) -> dict[str, Any]:
    await context.writer.custom({"type": "data-progress", "data": {"p": 1}})
    await context.writer.custom({"type": "data-secret", "data": {"s": 1}})
    await context.writer.custom({"type": "data-note", "data": 1, "transient": True})
    return {"n": input.n}


class DropSecret(Processor):
    id = "drop-secret"
    process_data_parts = True

    async def process_output_stream(self, *, part, **_):
        return None if part.type == "data-secret" else part


class StripFirstUser(Processor):
    """P30: edits only the provider prompt."""

    id = "strip"

    def process_llm_request(self, *, prompt, **_):
        return {"prompt": [m for m in prompt if m.get("content") != "SECRET-CONTEXT"]}


class StepSystem(Processor):
    id = "step-system"

    def process_input(self, *, message_list, **_):
        message_list.add_system("added by process_input")
        return message_list

    def process_input_step(self, *, step_number, **_):
        if step_number == 0:
            return {"system_messages": [{"role": "system", "content": "STEP ZERO ONLY"}]}
        return None


class OnlyA(Processor):
    id = "only-a"

    def process_input_step(self, **_):
        return {"active_tools": ["tool_a", "tool_b"]}


def prepare_step(*, step_number, **_):
    return {"active_tools": ["tool_b"]}


class BlockT1(Processor):
    id = "block-t1"

    def process_tool_result(self, *, tool_call_id, abort, **_):
        if tool_call_id == "t1":
            abort("t1 result not allowed")


class BlockResult(Processor):
    id = "block-result"

    def process_output_result(self, *, abort, **_):
        abort("final answer rejected")


def _echo_tool(name):
    return create_tool(id=name, description=name, execute=lambda i: {"tool": name})


data_agent = Agent(id="data-agent", model="openai/threadline-data", output_processors=[DropSecret()],
                   tools=[create_tool(id="data_tool", description="d", input_schema=DataTool, execute=data_tool)])
prompt_agent = Agent(id="prompt-agent", model="openai/threadline-prompt", input_processors=[StripFirstUser()])
system_agent = Agent(id="system-agent", model="openai/threadline-system", instructions="ORIGINAL",
                     input_processors=[StepSystem()], tools=[_echo_tool("tool_a")])
active_agent = Agent(id="active-agent", model="openai/threadline-active", input_processors=[OnlyA()],
                     tools=[_echo_tool("tool_a"), _echo_tool("tool_b")], default_options={"prepare_step": prepare_step})
t1_agent = Agent(id="t1-agent", model="openai/threadline-t1", output_processors=[BlockT1()],
                 tools=[_echo_tool("tool_a")])
result_agent = Agent(id="result-agent", model="openai/threadline-result", output_processors=[BlockResult()])
agents += [data_agent, prompt_agent, system_agent, active_agent, t1_agent, result_agent]


class AlwaysRetryStep(Processor):
    id = "always-retry"

    def process_output_step(self, *, retry_count, state, abort, **_):
        state.setdefault("seen", []).append(retry_count)
        abort("again", retry=True)


class StreamRetry(Processor):
    id = "stream-retry"

    async def process_output_stream(self, *, part, retry_count, abort, **_):
        if part.type == "text-delta" and "BAD" in part.payload.text and retry_count == 0:
            abort("no BAD words", retry=True)
        return part


cap1 = Agent(id="cap1", model="openai/threadline-cap1", output_processors=[AlwaysRetryStep()], max_processor_retries=1)
stream_retry = Agent(id="stream-retry", model="openai/threadline-sretry", output_processors=[StreamRetry()],
                     max_processor_retries=3)
agents += [cap1, stream_retry]


class Recorder(Processor):
    id = "recorder"

    def process_tool_result(self, *, tool_name, state, **_):
        state.setdefault("results", []).append(tool_name)


def _explode(_input):
    raise RuntimeError("tool broke")


raising = Agent(id="raising", model="openai/threadline-raising", output_processors=[Recorder()],
                tools=[create_tool(id="boom", description="fails", execute=_explode), _echo_tool("fine")])
agents += [raising]

sig = Agent(id="sig", model="openai/threadline-sig")
agents += [sig]

fanout = Agent(id="fanout", model="openai/threadline-fanout")
agents += [fanout]


# --- notifications: the default policy, and the seed's custom policy --------------------------------
def _seed_decide(record, **_):
    from datetime import UTC, datetime, timedelta

    if record.priority == "low":
        return {"action": "summarize", "summary_at": datetime.now(UTC) + timedelta(minutes=30)}
    return None


notes = Agent(id="notes", model="openai/threadline-notes")
notes_custom = Agent(id="notes-custom", model="openai/threadline-notes",
                     notifications={"delivery_policy": {"priorities": {"urgent": "deliver"}, "decide": _seed_decide,
                                                        "sources": {"spam": "discard"}}})
agents += [notes, notes_custom]

mailer = Agent(id="mailer", model="openai/threadline-mailer", tools=[_email_tool])
agents += [mailer]

from threadline.inbox.tool import inbox_tool  # noqa: E402

inbox_agent = Agent(id="inbox-agent", model="openai/threadline-inbox", tools=[inbox_tool()])
agents += [inbox_agent]


# --- notifications: custom actions (queue, hold, persist, timed), vector N8, case C19 --------------
def _actions_decide(record, thread_state, now):
    from datetime import timedelta

    if record.kind == "hold-me":  # DECISIONS 10: held while the thread is busy, re-decided when idle
        return "hold" if thread_state == "active" else {"action": "deliver", "reason": "released-on-idle"}
    if record.kind == "queue-me":
        return "queue"
    if record.kind == "persist-me":
        return "persist"
    if record.kind.startswith("later"):  # timed: an hour from now (tests move the scheduler's clock)
        if record.priority == "low":
            return {"action": "summarize", "summary_at": now + timedelta(hours=1)}
        return {"action": "defer", "deliver_at": now + timedelta(hours=1), "reason": "later"}
    return None


notes_actions = Agent(id="notes-actions", model="openai/threadline-actions",
                      notifications={"delivery_policy": {"decide": _actions_decide}})
notes_n8 = Agent(id="notes-n8", model="openai/threadline-actions",
                 notifications={"delivery_policy": {"decide": lambda **_: None, "sources": {"github": "discard"},
                                                    "priorities": {"urgent": "persist"}}})
a19 = Agent(id="A19", model="openai/threadline-a19", notifications={"digest_window_s": 1.0})
agents += [notes_actions, notes_n8, a19]


# --- crash safety: a model per (thread, step), a tool with a counted side effect ---------------------
class PerStepModel(Processor):
    """Sends step N of a run on thread T to the fake model ``threadline-<prefix>-<T>-s<N>``, so a
    test scripts each step separately (a re-executed step asks the same queue again)."""

    id = "per-step-model"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def process_input_step(self, *, step_number, request_context, **_):
        return {"model": f"openai/threadline-{self.prefix}-{request_context['thread_id']}-s{step_number}"}


replayer = Agent(id="replayer", model="openai/threadline-replayer", tools=[_email_tool],
                 input_processors=[PerStepModel("replay")])
agents += [replayer]


class EffectInput(BaseModel):
    n: int


async def chaos_effect(input: EffectInput, context: Any) -> dict[str, Any]:
    """Works a little, then records one execution and the process that ran it (the side effect
    the checker counts)."""
    import asyncio
    import os

    import asyncpg

    from threadline.config import get_settings

    await context.writer.custom({"type": "data-progress", "data": {"n": input.n, "pct": 50}})
    await asyncio.sleep(0.2)
    conn = await asyncpg.connect(get_settings().pg_dsn)
    try:
        await conn.execute("INSERT INTO chaos_effects (run_id, tool_call_id, idempotency_key, pid) VALUES ($1, $2, $3, $4)",
                           context.run_id, context.tool_call_id, context.idempotency_key, os.getpid())
    finally:
        await conn.close()
    return {"done": input.n}


class RetryUnreachableModel(Processor):
    """Asks the model again when it could not be reached (the fake model shares a loaded machine)."""

    id = "retry-unreachable-model"

    def process_api_error(self, *, error, **_):
        return {"retry": bool(error.retryable)}


chaos_agent = Agent(id="chaos", model="openai/threadline-chaos",
                    tools=[create_tool(id="chaos_effect", description="a counted side effect",
                                       input_schema=EffectInput, execute=chaos_effect)],
                    input_processors=[PerStepModel("chaos")], error_processors=[RetryUnreachableModel()],
                    max_processor_retries=3)
agents += [chaos_agent]

# C24 (PgBouncer) and issue 6 item 8 (big payloads): the model is chosen per run from the request
# context, so concurrent runs each take their own script queue (``threadline-pooled-<n>``).
from threadline.examples.support import lookup_customer_tool  # noqa: E402


class BlobInput(BaseModel):
    size: int = Field(description="bytes of text to return")


async def make_blob(input: BlobInput, context: Any) -> dict[str, Any]:
    """A big tool result: ``size`` characters cycling through the alphabet and digits."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return {"blob": (alphabet * (input.size // len(alphabet) + 1))[:input.size]}


_blob_tool = create_tool(id="make_blob", description="return a big text", input_schema=BlobInput, execute=make_blob)
pooled_agent = Agent(id="pooled-agent", model=lambda ctx: f"openai/threadline-pooled-{ctx.get('n', 'x')}",
                     tools=[lookup_customer_tool, _blob_tool])
agents += [pooled_agent]

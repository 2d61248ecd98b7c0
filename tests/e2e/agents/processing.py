"""Agents whose input and output processors are under test: aborts, tripwires, history filters,
cached answers, prompt and system-message edits, state carried across steps and workers."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from threadline.events.messages import is_user_authored
from threadline.runtime import Agent, Processor, create_tool


class ScrubSwallowingAbort(Processor):
    """Aborts on a leaked system prompt inside a broad ``except`` (that must not swallow it)."""

    id = "scrub"

    async def process_output_stream(self, *, part, abort, **_):
        try:
            if part.type == "text-delta" and "SYSTEM PROMPT:" in part.payload.text:
                abort("system prompt leak", metadata={"rule": "sp-1"})
        except Exception:  # noqa: BLE001 - "fail open" on purpose: the abort must get through anyway
            return part
        return part


class RecordParts(Processor):
    """Records every part it is shown."""

    id = "tail"

    async def process_output_stream(self, *, part, state, **_):
        state.setdefault("parts", []).append({"type": part.type, "payload": part.payload})
        return part


class BlockEmailAddresses(Processor):
    """A tripwire in ``process_input`` when the new user input holds an e-mail address."""

    id = "pii"

    def process_input(self, *, messages, message_list, abort, **_):
        for m in message_list.get.input.db():  # the new input (``messages`` also holds the history)
            if is_user_authored(m) and any("@" in (p.text or "") for p in m.content.parts if p.type == "text"):
                abort("PII in input", metadata={"category": "pii"})
        return messages


class DropToolParts(Processor):
    """Hides tool invocations from the model (must not rewrite the stored history)."""

    id = "notools"

    def process_input(self, *, messages, **_):
        out = []
        for m in messages:
            parts = [p for p in m.content.parts if p.type != "tool-invocation"]
            out.append({**m, "content": {**m.content, "parts": parts}})
        return out


class CountChunksPerStep(Processor):
    """Counts output chunks in ``state`` and records the count at the end of each step."""

    id = "chunk-counter"

    async def process_output_stream(self, *, part, state, **_):
        state["count"] = state.get("count", 0) + 1
        return part

    async def process_output_step(self, *, step_number, state, **_):
        state.setdefault("per_step", []).append([step_number, state.get("count", 0)])


class SlowInput(BaseModel):
    seconds: float


async def slow(input: SlowInput) -> dict[str, Any]:
    await asyncio.sleep(input.seconds)
    return {"slept": input.seconds}


class ReplayCachedAnswer(Processor):
    """Answers from a cache instead of calling the model (``process_llm_request`` returns a
    ``response``; see docs/decisions.md#cached-responses)."""

    id = "cache"

    def process_llm_request(self, **_):
        return {"response": {"chunks": [{"type": "text-delta", "payload": {"id": "t0", "text": "cached "}},
                                        {"type": "text-delta", "payload": {"id": "t0", "text": "answer"}}]}}

    def process_llm_response(self, *, from_cache, state, **_):
        state.setdefault("from_cache", []).append(from_cache)


class Upper(Processor):
    """Upper-cases text deltas."""

    id = "upper"

    async def process_output_stream(self, *, part, **_):
        if part.type == "text-delta":
            part.payload.text = part.payload.text.upper()
        return part


class Shout(Upper):
    """``Upper`` under another id, for call-level processor lists."""

    id = "shout"


class StripSecretContext(Processor):
    """Edits only the provider prompt (the stored messages keep the secret context)."""

    id = "strip"

    def process_llm_request(self, *, prompt, **_):
        return {"prompt": [m for m in prompt if m.get("content") != "SECRET-CONTEXT"]}


class StepZeroSystem(Processor):
    """Adds a system message in ``process_input`` and another for step 0 only."""

    id = "step-system"

    def process_input(self, *, message_list, **_):
        message_list.add_system("added by process_input")
        return message_list

    def process_input_step(self, *, step_number, **_):
        if step_number == 0:
            return {"system_messages": [{"role": "system", "content": "STEP ZERO ONLY"}]}
        return None


class RejectFinalAnswer(Processor):
    """Aborts in ``process_output_result``: the answer is rejected after it streamed."""

    id = "block-result"

    def process_output_result(self, *, abort, **_):
        abort("final answer rejected")


def _echo_tool(name: str):
    return create_tool(id=name, description=name, execute=lambda i: {"tool": name})


swallowed_abort = Agent(id="swallowed-abort", model="openai/threadline-swallowed-abort",
                        output_processors=[ScrubSwallowingAbort(), RecordParts()])
pii_tripwire = Agent(id="pii-tripwire", model="openai/threadline-pii-tripwire", input_processors=[BlockEmailAddresses()])
history_filter = Agent(id="history-filter", model="openai/threadline-history-filter", input_processors=[DropToolParts()])
stateful = Agent(id="stateful", model="openai/threadline-stateful", output_processors=[CountChunksPerStep()],
                 tools=[create_tool(id="slow", description="sleeps", input_schema=SlowInput, execute=slow)])
cached = Agent(id="cached", model="openai/threadline-cached", input_processors=[ReplayCachedAnswer()],
               output_processors=[Upper()])
prompt_agent = Agent(id="prompt-agent", model="openai/threadline-prompt", input_processors=[StripSecretContext()])
system_agent = Agent(id="system-agent", model="openai/threadline-system", instructions="ORIGINAL",
                     input_processors=[StepZeroSystem()], tools=[_echo_tool("tool_a")])
result_agent = Agent(id="result-agent", model="openai/threadline-result", output_processors=[RejectFinalAnswer()])

agents = [swallowed_abort, pii_tripwire, history_filter, stateful, cached, prompt_agent, system_agent, result_agent]
named = [Shout()]
"""Processors named by id in call-level options (the agents' own are named automatically)."""

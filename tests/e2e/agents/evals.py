"""Agents with scorers, tool payload transforms, and the objects a
call made in-process passes (processors, hooks, ``prepare_step``)."""

from __future__ import annotations

import asyncio

from threadline.runtime import Agent, Processor, create_tool, tool
from threadline.runtime.scorers import judge
from threadline.runtime.voice import Voice


# --- scorers (decision 71) -----------------------------------------------------------------------
async def _length(run):
    await asyncio.sleep(0)
    return {"score": min(1.0, len(run.output) / 10), "reason": f"{len(run.output)} chars for {run.input_text!r}"}


def _never(run):
    raise AssertionError("a scorer sampled at 0 never runs")


scored = Agent(id="scored", model="openai/threadline-scored", scorers={
    "length": {"scorer": _length, "sampling": {"type": "ratio", "rate": 1}},
    "judge": {"scorer": judge(model="openai/threadline-judge", instructions="Rate the answer."), "sampling": 1.0},
    "never": {"scorer": _never, "sampling": 0},
})
unsampled = Agent(id="unsampled", model="openai/threadline-unsampled", scorers={
    "length": {"scorer": _length, "sampling": 0.0},
    "judge": {"scorer": judge(model="openai/threadline-judge"), "sampling": {"type": "none"}},
})

agents = [scored, unsampled]


# --- tool payload transforms (decision 72) -------------------------------------------------------
@tool(description="Look a customer up.", transform={
    "display": {"input": lambda ctx: {"customer_id": ctx.input["customer_id"]},
                "output": lambda ctx: {"display_name": ctx.output["display_name"]}},
    "transcript": {"input": lambda ctx: {"customer_id": ctx.input["customer_id"]},
                   "output": lambda ctx: None},  # fails closed: a placeholder is stored
})
def lookup_customer(args: dict) -> dict:
    return {"display_name": "Acme", "api_key": f"key-of-{args['secret']}"}


@tool(description="Record an audit note.")
def audit(args: dict) -> dict:
    return {"stored": args["note"]}


def _redact(ctx):
    """The agent's policy (transcript only): every payload of a tool without its own rule."""
    return {"redacted": ctx.phase}


transforming = Agent(id="transforming", model="openai/threadline-transforming", tools=[lookup_customer, audit],
                     transform={"transformToolPayload": _redact, "targets": ["transcript"]})
agents.append(transforming)


# --- call-level processors, hooks and prepare_step as objects (decision 73) ------------------------
class TagCall(Processor):
    """Registered nowhere (no agent lists it, nor the module's ``processors``): a call reaches it
    only by reference."""

    id = "tag-call"

    def process_input(self, *, messages, message_list, **_):
        message_list.add_system("This run was tagged by a call-level processor object.")
        return messages


tag_call = TagCall()


def answer_from_call_hook(ctx):
    return {"proceed": False, "output": {"by": "call hook", "tool": ctx.tool_name}}


call_hooks = {"before_tool_call": answer_from_call_hook}


def call_prepare_step(*, step_number, **_):
    return {"active_tools": ["tool_b"]}


def _never_run(_input):
    raise AssertionError("the call's hook answers for the tool")


called = Agent(id="called", model="openai/threadline-called",
               tools=[create_tool(id=name, description=name, execute=_never_run) for name in ("tool_a", "tool_b")])
agents.append(called)


# --- voice (decision 74) ---------------------------------------------------------------------------
voiced = Agent(id="voiced", model="openai/threadline-voiced",
               voice=Voice(speak_model="openai/threadline-tts", listen_model="openai/threadline-stt", speaker="nova",
                           response_format="wav"))
speaks_only = Agent(id="speaks-only", model="openai/threadline-voiced", voice={"speak": {"model": "openai/threadline-tts"}})
agents += [voiced, speaks_only]

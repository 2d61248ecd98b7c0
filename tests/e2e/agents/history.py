"""Agents of the history-integrity cases (B03, B04, B10, B12): retries scoped to the failed model
call, message ids stable across attempts, replays that match stored history, a message sent right
after an abort. Side effects are rows in PostgreSQL that the tests read back."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
from pydantic import BaseModel

from threadline.config import get_settings
from threadline.runtime import Agent, Processor, create_tool


async def _execute(sql: str, *args: Any) -> None:
    conn = await asyncpg.connect(get_settings().pg_dsn)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


# --- B03: a retry of step 1 must not re-run step 0's tool ---------------------------------------------
class ChargeInput(BaseModel):
    amount: int


async def charge(input: ChargeInput, context: Any) -> dict[str, Any]:
    """Counts its entries (``kind 'entered'``) and charges once (``kind 'charged'``) in ``b03_charges``."""
    await _execute("INSERT INTO b03_charges (run_id, tool_call_id, kind, amount) VALUES ($1, $2, 'entered', $3)",
                   context.run_id, context.tool_call_id, input.amount)
    await _execute("INSERT INTO b03_charges (run_id, tool_call_id, kind, amount) VALUES ($1, $2, 'charged', $3)",
                   context.run_id, context.tool_call_id, input.amount)
    return {"charged": input.amount}


class RetryOnce(Processor):
    """Asks for the model call again after the first error only; records what it was shown."""

    id = "r1"

    def process_api_error(self, *, error, retry_count, state, **_):
        state.setdefault("seen", []).append({"kind": error.kind, "retry_count": retry_count})
        return {"retry": retry_count == 0}


charge_tool = create_tool(id="charge", description="charge the card", input_schema=ChargeInput, execute=charge)
b03 = Agent(id="b03", model="openai/threadline-b03", tools=[charge_tool], error_processors=[RetryOnce()],
            max_processor_retries=1, max_retries=0)  # the processor decides: no model-level retry
b03_plain = Agent(id="b03-plain", model="openai/threadline-b03-plain", tools=[charge_tool], max_retries=0)


# --- B04: one message id for the turn, across steps, retries and re-executions ------------------------
class LookupInput(BaseModel):
    id: str


async def lookup(input: LookupInput, context: Any) -> dict[str, Any]:
    return {"id": input.id, "name": "Ann"}


class Quality(Processor):
    """Asks for the step again (once) when its text is a draft."""

    id = "q"

    def process_output_step(self, *, text, abort, **_):
        if "DRAFT" in (text or ""):
            abort("more", retry=True)


b04 = Agent(id="b04", model="openai/threadline-b04", output_processors=[Quality()], max_processor_retries=1,
            tools=[create_tool(id="lookup", description="look a customer up", input_schema=LookupInput,
                               execute=lookup)])


# --- B10: replays match stored history; step chunks do not copy the request ----------------------------
class NoInput(BaseModel):
    pass


async def noop(input: NoInput, context: Any) -> dict[str, Any]:
    return {"ok": True}


b10 = Agent(id="b10", model="openai/threadline-b10", default_options={"max_steps": 5}, max_retries=0,
            tools=[create_tool(id="noop", description="does nothing", input_schema=NoInput, execute=noop)])


# --- B12: a message right after an abort starts the next run --------------------------------------------
class SleepInput(BaseModel):
    seconds: float = 5.0


async def sleep_tool(input: SleepInput, context: Any) -> dict[str, Any]:
    await asyncio.sleep(input.seconds)
    return {"slept": input.seconds}


b12 = Agent(id="b12", model="openai/threadline-b12",
            tools=[create_tool(id="sleep_tool", description="sleeps", input_schema=SleepInput, execute=sleep_tool)])

agents = [b03, b03_plain, b04, b10, b12]

"""Agents of the crash, replay and chaos tests: each step of a run asks its own fake model queue,
and a tool records every execution (the side effect the exactly-once checker counts)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import asyncpg
from pydantic import BaseModel

from threadline.config import get_settings
from threadline.runtime import Agent, Processor, create_tool
from threadline.transient import is_transient

from .tools import email_tool


class PerStepModel(Processor):
    """Sends step N of a run on thread T to the fake model ``threadline-<prefix>-<T>-s<N>``, so a
    test scripts each step separately (a re-executed step asks the same queue again)."""

    id = "per-step-model"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def process_input_step(self, *, step_number, request_context, **_):
        return {"model": f"openai/threadline-{self.prefix}-{request_context['thread_id']}-s{step_number}"}


class EffectInput(BaseModel):
    n: int


EFFECT_RETRY_S = 60.0
"""How long :func:`record_effect` retries a PostgreSQL it cannot reach (the chaos test restarts it)."""


async def record_effect(dsn: str, run_id: str, tool_call_id: str, idempotency_key: str | None, pid: int) -> None:
    """Insert one ``chaos_effects`` row, retrying through a PostgreSQL restart: the side effect is
    the tool's, and a tool that gave up on it would end as a ``tool-error`` with the effect missing
    (chaos seed 1 at a restart: "ConnectionError: unexpected connection_lost() call"). After a
    connection lost mid-insert the row is looked up first, so an insert that committed is not
    made twice."""
    deadline = asyncio.get_running_loop().time() + EFFECT_RETRY_S
    tried = False
    while True:
        try:
            conn = await asyncpg.connect(dsn, timeout=5)
            try:
                if tried and await conn.fetchval(
                        "SELECT 1 FROM chaos_effects WHERE run_id = $1 AND tool_call_id = $2 AND pid = $3 "
                        "AND idempotency_key IS NOT DISTINCT FROM $4", run_id, tool_call_id, pid, idempotency_key):
                    return
                tried = True
                await conn.execute("INSERT INTO chaos_effects (run_id, tool_call_id, idempotency_key, pid) "
                                   "VALUES ($1, $2, $3, $4)", run_id, tool_call_id, idempotency_key, pid)
                return
            finally:
                await conn.close()
        except Exception as exc:
            if not is_transient(exc) or asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


async def chaos_effect(input: EffectInput, context: Any) -> dict[str, Any]:
    """Works a little, then records one execution and the process that ran it."""
    await context.writer.custom({"type": "data-progress", "data": {"n": input.n, "pct": 50}})
    await asyncio.sleep(0.2)
    await record_effect(get_settings().pg_dsn, context.run_id, context.tool_call_id, context.idempotency_key,
                        os.getpid())
    return {"done": input.n}


class RetryUnreachableModel(Processor):
    """Asks the model again when it could not be reached (the fake model shares a loaded machine)."""

    id = "retry-unreachable-model"

    def process_api_error(self, *, error, **_):
        return {"retry": bool(error.retryable)}


replayer = Agent(id="replayer", model="openai/threadline-replayer", tools=[email_tool],
                 input_processors=[PerStepModel("replay")])
chaos_agent = Agent(id="chaos", model="openai/threadline-chaos",
                    tools=[create_tool(id="chaos_effect", description="a counted side effect",
                                       input_schema=EffectInput, execute=chaos_effect)],
                    input_processors=[PerStepModel("chaos")], error_processors=[RetryUnreachableModel()],
                    max_processor_retries=3)

agents = [replayer, chaos_agent]

"""Agents of the durable-composition cases (D09–D11, tests/e2e/test_d09_*, test_d10_*, test_d11_*).

``d10`` has tools that never return — ``hang`` (``async``, waits on an event no one sets),
``hang_sync`` (a plain ``def`` that sleeps an hour), ``quick`` (sleeps 10 s, its own ``timeout_s``
2 s) — and the workflow ``wf`` (the tool ``workflow-wf``) whose second step hangs (its third
writes a side effect); the worker of the test runs with ``THREADLINE_TOOL_TIMEOUT_S=5``.
``d10-lead`` has the sub-agent ``slow`` (``d10-slow``), whose only tool hangs with no deadline
(``timeout_s=None``); the orchestrator of that test runs with ``THREADLINE_SUB_AGENT_TIMEOUT_S=20``.

``d09-rec`` has itself as its sub-agent ``self``; ``d09-b`` has ``c`` (``d09-c``), which has ``b``
(``d09-b``): a tree that only the depth limit stops. Every step of every run asks the fake model
queue ``threadline-d09-<thread>-s<step>``.

``d11`` has seven tools, each of which writes one ``side_effects`` row (its side effect, counted by
the test) and then returns a Python value with no JSON form of its own, and the workflow ``wf``
(the tool ``workflow-wf``) whose first step returns a ``Decimal`` and whose second step writes a
side effect; and the tool ``dchunk``, which writes a ``data-d11`` chunk holding a ``Decimal`` and
a set. Each step of a run asks its own fake model queue (``PerStepModel("d11")``).
"""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from typing import Any

import asyncpg

from threadline.config import get_settings
from threadline.runtime import Agent, create_tool
from threadline.runtime.workflows import Step, create_workflow

from .crashes import PerStepModel

SIDE_EFFECTS_DDL = "CREATE TABLE IF NOT EXISTS side_effects (k text, at timestamptz DEFAULT now())"
"""The side-effect table of the cases: one row per execution of a counted tool (``k`` names it)."""


async def side_effect(k: str) -> None:
    """One ``side_effects`` row ``k``."""
    conn = await asyncpg.connect(get_settings().pg_dsn, timeout=10)
    try:
        await conn.execute("INSERT INTO side_effects (k) VALUES ($1)", k)
    finally:
        await conn.close()


D11_VALUES: dict[str, Any] = {
    "dec": {"amount": Decimal("12.50")},
    "aset": {"ids": {3, 1, 2}},
    "raw": b"\x00\xff",
    "big": {"n": 2**70},
    "nan": {"x": float("nan")},
    "obj": object(),
    "tkey": {(1, 2): "x"},
}
"""What each ``d11`` tool returns, by tool id."""


def _returning(name: str) -> Any:
    async def execute(_input: Any, context: Any) -> Any:
        await side_effect(f"{name}:{context.run_id}")
        return D11_VALUES[name]

    return execute


async def _s1(_value: Any, context: Any) -> Any:
    await side_effect(f"wf.s1:{context.run_id}")
    return {"when": Decimal("1.5")}


async def _s2(value: Any, context: Any) -> Any:
    await side_effect(f"wf.s2:{context.run_id}")
    return {"after": value}


async def _data_chunk(_input: Any, context: Any) -> str:
    await side_effect(f"dchunk:{context.run_id}")
    await context.writer.custom({"type": "data-d11", "data": {"v": Decimal("2.5"), "s": {2, 1}}})
    return "written"


wf = (create_workflow(id="d11-wf", description="Two steps; the first returns a Decimal.")
      .then(Step(id="s1", execute=_s1)).then(Step(id="s2", execute=_s2)).commit())

d11 = Agent(id="d11", model="openai/threadline-d11", input_processors=[PerStepModel("d11")],
            tools=[create_tool(id=name, description=f"returns {name}", execute=_returning(name))
                   for name in D11_VALUES]
            + [create_tool(id="dchunk", description="writes a data chunk", execute=_data_chunk)],
            workflows={"wf": wf})

async def _hang(_input: Any) -> str:
    await asyncio.Event().wait()
    return "never"


def _hang_sync(_input: Any) -> str:
    time.sleep(3600)
    return "never"


async def _quick(_input: Any) -> str:
    await asyncio.sleep(10)
    return "slept"


async def _d10_s1(_value: Any, context: Any) -> Any:
    await side_effect(f"wf10.s1:{context.run_id}")
    return {"one": 1}


async def _d10_s3(_value: Any, context: Any) -> Any:
    await side_effect(f"wf10.s3:{context.run_id}")
    return {"three": 3}


wf10 = (create_workflow(id="d10-wf", description="Three steps; the second hangs.")
        .then(Step(id="s1", execute=_d10_s1)).then(Step(id="s2", execute=_hang))
        .then(Step(id="s3", execute=_d10_s3)).commit())

d10 = Agent(id="d10", model="openai/threadline-d10", input_processors=[PerStepModel("d10")],
            tools=[create_tool(id="hang", description="waits for ever", execute=_hang),
                   create_tool(id="hang_sync", description="sleeps an hour", execute=_hang_sync),
                   create_tool(id="quick", description="sleeps 10 s", execute=_quick, timeout_s=2)],
            workflows={"wf": wf10})

slow = Agent(id="d10-slow", description="Works on it for ever.", model="openai/threadline-d10-slow",
             input_processors=[PerStepModel("d10s")],
             tools=[create_tool(id="hang_forever", description="no deadline", execute=_hang, timeout_s=None)])
d10_lead = Agent(id="d10-lead", model="openai/threadline-d10-lead", agents={"slow": slow},
                 input_processors=[PerStepModel("d10l")])

# --- D09: sub-agent trees -------------------------------------------------------------------------------
rec: Agent = Agent(id="d09-rec", description="Delegates to itself.", model="openai/threadline-d09-rec",
                   input_processors=[PerStepModel("d09")], agents=lambda _ctx: {"self": rec})
d09_c: Agent
d09_b: Agent = Agent(id="d09-b", description="Asks C.", model="openai/threadline-d09-b",
                     input_processors=[PerStepModel("d09")], agents=lambda _ctx: {"c": d09_c})
d09_c = Agent(id="d09-c", description="Asks B.", model="openai/threadline-d09-c",
              input_processors=[PerStepModel("d09")], agents=lambda _ctx: {"b": d09_b})

agents = [d11, d10, slow, d10_lead, rec, d09_b, d09_c]

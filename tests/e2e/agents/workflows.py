"""Agents of the workflow tests (docs/workflows.md): ``shipper`` has the durable workflow ``ship``
(the tool ``workflow-ship``): reserve, then charge and label in parallel, then courier or post
by a branch, then a summary. Every step records each execution in ``wf_effects`` (with the
process id), the side effect the tests count; ``charge`` holds at the pause point
``wf_charge_after_effect`` (key ``<thread>/charge``) after its effect, so a test can kill the
worker while the step runs; an order id starting ``fail`` makes ``charge`` raise."""

from __future__ import annotations

import os
from typing import Any

import asyncpg
from pydantic import BaseModel

from threadline._internal.faults import pause_point
from threadline.config import get_settings
from threadline.runtime import Agent
from threadline.runtime.workflows import Step, create_step, create_workflow

from .crashes import PerStepModel, RetryUnreachableModel


class Order(BaseModel):
    order_id: str
    express: bool = False


class Shipped(BaseModel):
    order_id: str
    via: str
    total: int
    label: str


async def effect(context: Any) -> None:
    """One ``wf_effects`` row: this execution of this step, in this process."""
    conn = await asyncpg.connect(get_settings().pg_dsn, timeout=10)
    try:
        await conn.execute("INSERT INTO wf_effects (run_id, tool_call_id, step, idempotency_key, pid) "
                           "VALUES ($1, $2, $3, $4, $5)", context.run_id, context.tool_call_id, context.step_id,
                           context.idempotency_key, os.getpid())
    finally:
        await conn.close()


async def reserve(order: Order, context: Any) -> dict[str, Any]:
    await effect(context)
    return {"order_id": order.order_id, "express": order.express}


async def charge(inp: dict[str, Any], context: Any) -> dict[str, Any]:
    await effect(context)
    await context.writer.custom({"type": "data-payment", "data": {"order": inp["order_id"]}, "transient": True})
    await pause_point("wf_charge_after_effect", f"{context.thread_id}/charge")
    if inp["order_id"].startswith("fail"):
        raise RuntimeError("card declined")
    return {"total": 30 if inp["express"] else 10}


async def label(inp: dict[str, Any], context: Any) -> dict[str, Any]:
    await effect(context)
    return {"label": f"L-{inp['order_id']}"}


async def courier(inp: dict[str, Any], context: Any) -> dict[str, Any]:
    await effect(context)
    return {"via": "courier"}


async def post(inp: dict[str, Any], context: Any) -> dict[str, Any]:
    await effect(context)
    return {"via": "post"}


async def summary(inp: dict[str, Any], context: Any) -> Shipped:
    await effect(context)
    return Shipped(order_id=context.init_data["order_id"], via=next(iter(inp.values()))["via"],
                   total=context.get_step_result("charge")["total"], label=context.get_step_result("label")["label"])


ship = (create_workflow(id="ship-order", input_schema=Order, output_schema=Shipped,
                        description="Ship an order: reserve, charge and label, then courier (express) or post.")
        .then(create_step(id="reserve", execute=reserve, input_schema=Order))
        .parallel([Step(id="charge", execute=charge), Step(id="label", execute=label)])
        .branch([(lambda v: v["charge"]["total"] > 20, Step(id="courier", execute=courier)),
                 (lambda v: v["charge"]["total"] <= 20, Step(id="post", execute=post))])
        .then(Step(id="summary", execute=summary, output_schema=Shipped))
        .commit())

shipper = Agent(id="shipper", model="openai/threadline-shipper", workflows={"ship": ship},
                input_processors=[PerStepModel("wf")], error_processors=[RetryUnreachableModel()],
                max_processor_retries=3)

agents = [shipper]

"""D09, the pure parts (decision 219): how deep a run is in its sub-agent tree, the step loop
refusing a sub-agent call at the limit (a tool error, no child requested), and child thread ids
that stay within what ingress takes as a thread id at any depth, so a client can name them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.unit.test_step_loop import SIGNAL, _run
from threadline.config import Settings
from threadline.events.ingress import AbortRequest, SendMessage
from threadline.orchestration.children import PARENT_OPTION, depth_limit_error, depth_of
from threadline.runtime import Agent
from threadline.runtime.step.loop import StepLoop
from threadline.runtime.step.ports import StepInputs, Suspend
from threadline.runtime.sub_agents import CHILD_THREAD_MAX, child_ids
from threadline.testing import MemorySink, MemoryStepStore, ScriptedModel

pytestmark = pytest.mark.unit


def _child_options(depth: object = None) -> dict[str, Any]:
    parent: dict[str, Any] = {"run_id": "run-0", "resource_id": "res", "thread_id": "th-0", "tool_call_id": "k0",
                              "tool_name": "agent-self"}
    if depth is not None:
        parent["depth"] = depth
    return {PARENT_OPTION: parent}


def test_d09_a_runs_depth_is_read_from_its_parent_option() -> None:
    assert depth_of({}) == 0
    assert depth_of(_child_options(3)) == 3
    assert depth_of(_child_options()) == 1  # a child stored before depths were recorded
    assert depth_of(_child_options("2")) == 1 and depth_of(_child_options(True)) == 1
    assert depth_limit_error(3) == "sub-agent depth limit 3 reached"


def test_d09_the_depth_limit_is_a_finite_setting() -> None:
    assert Settings().sub_agent_max_depth == 5
    assert Settings(sub_agent_max_depth=3).sub_agent_max_depth == 3


rec = Agent(id="rec", description="Delegates to itself.", agents=lambda _ctx: {"self": rec})
CALL = {"type": "tool-call", "payload": {"toolCallId": "k1", "toolName": "agent-self", "args": {"prompt": "deeper"}}}


async def _step(depth: int) -> tuple[Any, MemoryStepStore, MemorySink]:
    loop = StepLoop(default_model="openai/threadline-test", model_api_base=None, model_timeout_s=5,
                    model=ScriptedModel([CALL], [{"type": "text-delta", "payload": {"text": "stopped"}}]),
                    sub_agent_max_depth=3)
    run = replace(_run(), options=_child_options(depth) if depth else {})
    store, sink = MemoryStepStore(), MemorySink("run-1", 0)
    outcome = await loop.run(run, rec, StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]), sink,
                             store)
    return outcome, store, sink


async def test_d09_below_the_limit_a_sub_agent_call_requests_a_child() -> None:
    outcome, store, _ = await _step(2)
    assert outcome == Suspend("tool-calls") and [r.tool_call_id for r in store.saved[0].children] == ["k1"]


async def test_d09_at_the_limit_a_sub_agent_call_is_a_tool_error_and_no_child() -> None:
    outcome, store, sink = await _step(3)
    assert not isinstance(outcome, Suspend)
    assert store.tools == {"k1": (None, "sub-agent depth limit 3 reached")}
    assert all(not s.children for s in store.saved)
    [error] = [c["payload"]["error"] for c in sink.chunks if c["type"] == "tool-error"]
    assert error == {"name": "Error", "message": "sub-agent depth limit 3 reached"}


def test_d09_child_thread_ids_stay_nameable_at_any_depth() -> None:
    short = child_ids("run-1", "th-1", "agent-x", "call_1")[1]
    assert short == "th-1.agent-x.call_1"  # unchanged where it fits
    thread = "r" * 256
    seen = set()
    for level in range(6):
        thread = child_ids("run-1", thread, "agent-self", f"call_{level}_{'q' * 24}")[1]
        assert len(thread) <= CHILD_THREAD_MAX and thread not in seen
        seen.add(thread)
        AbortRequest(agent_id="a", resource_id="res-1", thread_id=thread)  # ingress takes it
        SendMessage(agent_id="a", resource_id="res-1", thread_id=thread, message="hi")
    a = child_ids("run-1", "r" * 256, "agent-self", "call_a")[1]
    b = child_ids("run-1", "r" * 256, "agent-self", "call_b")[1]
    assert a != b and a == child_ids("run-2", "r" * 256, "agent-self", "call_a")[1]  # stable, distinct

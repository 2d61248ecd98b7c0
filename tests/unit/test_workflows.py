"""Durable workflows, the pure part (:mod:`threadline.runtime.workflows`): the graph, the data flow
of then / parallel / branch, replay from a journal (a finished step never runs again, a running
one does), failures named, schemas checked, the ``workflow-<key>`` tool of an agent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from threadline.errors import ConfigurationError
from threadline.runtime import Agent
from threadline.runtime.dynamic import resolve_config
from threadline.runtime.step.tools import run_tool_call
from threadline.runtime.tools import ToolContext, ToolHooks
from threadline.runtime.workflows import (
    Entry,
    JournalUnavailableError,
    MemoryJournal,
    Step,
    Workflow,
    WorkflowFencedError,
    WorkflowStepError,
    create_step,
    run_workflow,
)
from threadline.transient import is_transient

pytestmark = pytest.mark.unit


class Order(BaseModel):
    order_id: str
    express: bool = False


class Shipped(BaseModel):
    order_id: str
    via: str
    total: int


class Writer:
    def __init__(self) -> None:
        self.chunks: list[dict[str, Any]] = []

    async def custom(self, chunk: dict[str, Any], options: Any = None) -> None:
        self.chunks.append(chunk)


def ctx(writer: Writer | None = None, journal: Any = None) -> ToolContext:
    return ToolContext(tool_call_id="call-1", run_id="run-1", thread_id="th-1", resource_id="res-1", agent_id="a",
                       step=0, idempotency_key="run-1:call-1", writer=writer or Writer(), journal=journal)


def order_workflow(ran: list[str]) -> Workflow:
    def reserve(order: Order, context: Any) -> dict[str, Any]:
        ran.append("reserve")
        assert context.idempotency_key == "run-1:call-1:0/reserve" and context.init_data["order_id"] == order.order_id
        return {"order_id": order.order_id, "express": order.express}

    async def charge(inp: dict[str, Any]) -> dict[str, Any]:
        ran.append("charge")
        return {"total": 30 if inp["express"] else 10}

    def label(inp: dict[str, Any]) -> dict[str, Any]:
        ran.append("label")
        return {"label": f"L-{inp['order_id']}"}

    def courier(inp: dict[str, Any]) -> dict[str, Any]:
        ran.append("courier")
        return {"via": "courier"}

    def post(inp: dict[str, Any]) -> dict[str, Any]:
        ran.append("post")
        return {"via": "post"}

    def summary(inp: dict[str, Any], context: Any) -> Shipped:
        ran.append("summary")
        via = next(iter(inp.values()))["via"]
        return Shipped(order_id=context.init_data["order_id"], via=via,
                       total=context.get_step_result("charge")["total"])

    return (Workflow(id="order", input_schema=Order, output_schema=Shipped)
            .then(create_step(id="reserve", execute=reserve, input_schema=Order))
            .parallel([Step(id="charge", execute=charge), Step(id="label", execute=label)])
            .branch([(lambda v: v["charge"]["total"] > 20, Step(id="courier", execute=courier)),
                     (lambda v: v["charge"]["total"] <= 20, Step(id="post", execute=post))])
            .then(Step(id="summary", execute=summary))
            .commit())


async def test_sequence_parallel_and_branch_flow_into_the_output_and_stream_progress():
    ran: list[str] = []
    writer, journal = Writer(), MemoryJournal()
    out = await run_workflow(order_workflow(ran), {"order_id": "o-1", "express": True}, ctx(writer), journal)
    assert out == {"order_id": "o-1", "via": "courier", "total": 30}
    assert ran[0] == "reserve" and sorted(ran[1:3]) == ["charge", "label"] and ran[3:] == ["courier", "summary"]
    assert journal.entries["2/:branch"] == Entry("success", ["courier"])
    assert journal.entries["1/charge"] == Entry("success", {"total": 30})
    kinds = [(c["type"], c["data"].get("stepId")) for c in writer.chunks]
    assert kinds[0] == ("data-workflow-step-start", "reserve") and kinds[-1] == ("data-workflow-finish", None)
    assert writer.chunks[-1]["data"] == {"workflowId": "order", "toolCallId": "call-1", "status": "success",
                                         "output": out}
    assert all(c["transient"] for c in writer.chunks)


async def test_a_re_execution_skips_finished_steps_and_reruns_only_the_running_one():
    ran: list[str] = []
    journal = MemoryJournal()
    journal.entries = {"0/reserve": Entry("success", {"order_id": "o-2", "express": False}),
                       "1/label": Entry("success", {"label": "L-o-2"}),
                       "1/charge": Entry("running")}
    writer = Writer()
    out = await run_workflow(order_workflow(ran), {"order_id": "o-2"}, ctx(writer), journal)
    assert ran == ["charge", "post", "summary"]
    assert out == {"order_id": "o-2", "via": "post", "total": 10}
    replayed = [c["data"]["stepId"] for c in writer.chunks if c["data"].get("replayed")]
    assert replayed == ["reserve", "label"]
    assert journal.started == ["1/charge", "2/post", "3/summary"]


async def test_a_recorded_branch_choice_is_kept_and_a_recorded_failure_is_not_retried():
    ran: list[str] = []
    journal = MemoryJournal()
    journal.entries = {"0/reserve": Entry("success", {"order_id": "o-3", "express": False}),
                       "1/charge": Entry("success", {"total": 10}), "1/label": Entry("success", {}),
                       "2/:branch": Entry("success", ["courier"]),  # chosen before the crash
                       "2/courier": Entry("failed", None, "RuntimeError: no courier")}
    with pytest.raises(WorkflowStepError, match="step courier failed: RuntimeError: no courier"):
        await run_workflow(order_workflow(ran), {"order_id": "o-3"}, ctx(), journal)
    assert ran == []


async def test_a_failing_step_is_recorded_and_named_and_later_steps_do_not_run():
    def boom(inp: Any) -> Any:
        raise RuntimeError("card declined")

    ran: list[str] = []
    wf = (Workflow(id="pay").then(Step(id="charge", execute=boom))
          .then(Step(id="after", execute=lambda v: ran.append("after"))).commit())
    journal, writer = MemoryJournal(), Writer()
    with pytest.raises(WorkflowStepError, match="workflow pay: step charge failed: RuntimeError: card declined"):
        await run_workflow(wf, {}, ctx(writer), journal)
    assert journal.entries == {"0/charge": Entry("failed", None, "RuntimeError: card declined")} and ran == []
    assert writer.chunks[-1]["data"]["status"] == "failed"


async def test_schemas_are_checked_input_step_output_and_json_schema():
    wf = Workflow(id="w", input_schema={"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}},
                  output_schema=Shipped).then(Step(id="s", execute=lambda v: {"via": "x"})).commit()
    with pytest.raises(ValueError, match="workflow w: invalid input: 'n' is a required property"):
        await run_workflow(wf, {}, ctx(), MemoryJournal())
    with pytest.raises(ValueError, match="workflow w: invalid output"):
        await run_workflow(wf, {"n": 1}, ctx(), MemoryJournal())
    typed = Workflow(id="t").then(Step(id="s", execute=lambda v: {"n": "x"}, output_schema=Order)).commit()
    with pytest.raises(WorkflowStepError, match="step s: invalid output"):
        await run_workflow(typed, {}, ctx(), MemoryJournal())


def test_the_graph_refuses_bad_shapes():
    s = Step(id="a", execute=lambda v: v)
    with pytest.raises(ConfigurationError, match="used twice"):
        Workflow(id="w").then(s).parallel([Step(id="a", execute=lambda v: v)])
    with pytest.raises(ConfigurationError, match="at least one step"):
        Workflow(id="w").parallel([])
    with pytest.raises(ConfigurationError, match="committed"):
        Workflow(id="w").then(s).commit().then(Step(id="b", execute=lambda v: v))
    with pytest.raises(ConfigurationError, match="must match"):
        Step(id="a b", execute=lambda v: v)
    with pytest.raises(ConfigurationError, match="branch takes"):
        Workflow(id="w").branch([(True, s)])
    with pytest.raises(ConfigurationError, match=r"call .commit\(\)"):
        Agent(id="x", workflows={"w": Workflow(id="w").then(s)})


class FencedJournal(MemoryJournal):
    async def start(self, path: str) -> None:
        raise WorkflowFencedError("run-1", 3)


async def test_a_fenced_journal_stops_the_step_instead_of_becoming_a_tool_error():
    ran: list[str] = []
    agent = Agent(id="x", workflows={"order": order_workflow(ran)})
    call = {"toolCallId": "call-1", "toolName": "workflow-order", "args": {"order_id": "o-4"}}
    with pytest.raises(WorkflowFencedError):
        await run_tool_call(call=call, tools=agent.tools, hooks=ToolHooks(), context=ctx(journal=lambda _: FencedJournal()),
                            agent_meta={})
    assert ran == []
    out, error = await run_tool_call(call=call, tools=agent.tools, hooks=ToolHooks(), context=ctx(), agent_meta={})
    assert error is None and out == {"order_id": "o-4", "via": "post", "total": 10}
    bad, error = await run_tool_call(call={**call, "args": {}}, tools=agent.tools, hooks=ToolHooks(), context=ctx(),
                                     agent_meta={})
    assert bad is None and "order_id" in (error or "")


async def test_workflows_are_tools_named_workflow_key_static_or_per_request_context():
    ran: list[str] = []
    static = Agent(id="s", workflows={"order": order_workflow(ran)})
    assert "workflow-order" in static.tools
    assert static.tools["workflow-order"].spec()["function"]["parameters"]["required"] == ["order_id"]
    dyn = Agent(id="d", tools=lambda rc: [], workflows=lambda rc: {rc["flow"]: order_workflow(ran)})
    cfg = await resolve_config(dyn, {"flow": "ship"}, "openai/x")
    assert list(cfg.tools) == ["workflow-ship"]
    both = Agent(id="b", tools=lambda rc: [], workflows={"order": order_workflow(ran)})
    assert list((await resolve_config(both, {}, "openai/x")).tools) == ["workflow-order"]


class UnreachableJournal(MemoryJournal):
    async def end(self, path: str, status: str, output: Any, error: str | None) -> None:
        raise JournalUnavailableError("postgres away")


async def test_an_unreachable_journal_hands_the_step_back_as_a_transient_fault():
    agent = Agent(id="x", workflows={"order": order_workflow([])})
    call = {"toolCallId": "call-1", "toolName": "workflow-order", "args": {"order_id": "o-5"}}
    with pytest.raises(JournalUnavailableError) as caught:
        await run_tool_call(call=call, tools=agent.tools, hooks=ToolHooks(),
                            context=ctx(journal=lambda _: UnreachableJournal()), agent_meta={})
    assert is_transient(caught.value)  # the step loop re-raises it: the step is re-executed, not failed


async def test_a_failing_parallel_step_lets_its_sibling_finish_and_record_first():
    async def slow(inp: Any) -> Any:
        await asyncio.sleep(0.05)
        return {"ok": True}

    def boom(inp: Any) -> Any:
        raise ValueError("nope")

    wf = Workflow(id="p").parallel([Step(id="boom", execute=boom), Step(id="slow", execute=slow)]).commit()
    journal = MemoryJournal()
    with pytest.raises(WorkflowStepError, match="step boom failed: ValueError: nope"):
        await run_workflow(wf, {}, ctx(), journal)
    assert journal.entries == {"0/boom": Entry("failed", None, "ValueError: nope"), "0/slow": Entry("success", {"ok": True})}

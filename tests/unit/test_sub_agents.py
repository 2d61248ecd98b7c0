"""Sub-agents (decisions 76-79): the pure parts — the tools an ``agents``
option exposes, the child ids, the outcome stored for the parent, the orchestrator's decision on
a ``suspended`` result, nested chunks — and the step loop suspending on a sub-agent call and
resuming with its child's result, in memory."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.checker import Figures, clean
from tests.unit.test_step_loop import SIGNAL, _loop, _run
from threadline.errors import ConfigurationError
from threadline.events import StepResult
from threadline.events.chunks import nested_chunk
from threadline.orchestration.children import child_outcome
from threadline.orchestration.runs import RunRow, SavePlan, SuspendRun, on_step_result, plan_save
from threadline.runtime import Agent
from threadline.runtime.dynamic import resolve_config
from threadline.runtime.registry import load_agents
from threadline.runtime.step.ports import Continue, RunState, StepInputs, Suspend
from threadline.runtime.sub_agents import (
    SubAgentTool,
    child_ids,
    prompt_of,
    sub_agent_tools,
)
from threadline.testing import MemorySink, MemoryStepStore, ScriptedModel

pytestmark = pytest.mark.unit

helper = Agent(id="helper-agent", description="Helps.")


def test_each_sub_agent_is_the_tool_agent_key_taking_a_prompt() -> None:
    lead = Agent(id="lead", agents={"helper": helper})
    tools = sub_agent_tools(lead.agents, lead.id)
    assert list(tools) == ["agent-helper"]
    tool = tools["agent-helper"]
    assert isinstance(tool, SubAgentTool) and tool.agent_id == "helper-agent" and tool.description == "Helps."
    assert tool.spec()["function"]["parameters"]["required"] == ["prompt"]


@pytest.mark.parametrize("bad", [{"x": "not an agent"}, ["helper"], {"bad key": helper}])
def test_a_bad_agents_option_is_refused(bad: Any) -> None:
    with pytest.raises(ConfigurationError):
        Agent(id="lead", agents=bad)


async def test_a_function_of_the_request_context_is_resolved_per_run() -> None:
    lead = Agent(id="lead", agents=lambda ctx: {"helper": helper} if ctx.get("helpers") else {})
    assert lead.agents == {}
    with_helpers = await resolve_config(lead, {"helpers": True}, "openai/x")
    without = await resolve_config(lead, {}, "openai/x")
    assert "agent-helper" in with_helpers.tools and "agent-helper" not in without.tools


def test_static_sub_agents_are_served_by_the_registry(tmp_path: Any, monkeypatch: Any) -> None:
    (tmp_path / "subs_mod.py").write_text(
        "from threadline.runtime import Agent\n"
        "inner = Agent(id='inner')\n"
        "agents = [Agent(id='outer', agents={'inner': inner})]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert set(load_agents("subs_mod")) == {"outer", "inner"}


def test_child_ids_are_the_same_for_every_re_execution_of_the_call() -> None:
    a = child_ids("run_p", "th", "agent-helper", "call-1")
    assert a == child_ids("run_p", "th", "agent-helper", "call-1")
    assert a != child_ids("run_p", "th", "agent-helper", "call-2")
    assert a[0].startswith("run_") and a[1] == "th.agent-helper.call-1"


def test_the_prompt_and_the_outcome_stored_for_the_parent() -> None:
    assert prompt_of({"prompt": "p"}) == "p" and prompt_of({"message": "m"}) == "m"
    assert prompt_of({"q": 1}) == '{"q":1}'
    assert child_outcome("finished", "done", None) == ({"text": "done"}, None)
    assert child_outcome("failed", None, {"message": "boom"}) == (None, "sub-agent run failed: boom")
    assert child_outcome("aborted", None, None) == (None, "sub-agent run aborted")


def _row(**kw: Any) -> RunRow:
    base: dict[str, Any] = {"run_id": "r", "resource_id": "res", "thread_id": "th", "agent_id": "a",
                            "status": "running", "epoch": 1, "step": 0, "steps_done": 1, "attempt": 1,
                            "kind": "stream", "request_id": None, "reply_to": None, "results_applied": 0}
    return RunRow(**{**base, **kw})


def _result(outcome: str, step: int = 0) -> StepResult:
    return StepResult(run_id="r", resource_id="res", thread_id="th", step=step, attempt=1, epoch=1, outcome=outcome)


def test_a_suspended_result_suspends_and_is_never_continued_by_the_worker() -> None:
    assert on_step_result(_row(), _result("suspended")) == SuspendRun(step=0)
    assert plan_save(_row(results_applied=None), _result("suspended")) == SavePlan()
    assert on_step_result(_row(epoch=2), _result("suspended")).__class__.__name__ == "Ignore"
    assert on_step_result(_row(results_applied=1), _result("suspended")).__class__.__name__ == "Ignore"


def test_a_nested_chunk_is_checked_as_the_child_chunk_it_carries() -> None:
    child = [{"type": t, "runId": "c", "step": 0, "attempt": 1, "seq": i, "payload": {}}
             for i, t in enumerate(["start", "text-delta", "finish"])]
    target = {"run_id": "p", "resource_id": "res", "thread_id": "th", "tool_call_id": "k", "tool_name": "agent-h"}
    nested = [nested_chunk(c, target) for c in child]
    assert nested[0]["type"] == "tool-output" and nested[0]["payload"]["toolCallId"] == "k"
    assert clean(nested, Figures())["c"] == child
    fig = Figures()  # a nested copy that differs from the child's own chunk is a conflict
    clean([*child, nested_chunk({**child[1], "payload": {"text": "other"}}, target)], fig)
    assert fig.duplicates == 1


async def test_the_loop_suspends_on_a_sub_agent_call_then_resumes_with_its_result() -> None:
    lead = Agent(id="lead", agents={"helper": helper})
    call = {"type": "tool-call", "payload": {"toolCallId": "k1", "toolName": "agent-helper", "args": {"prompt": "go"}}}
    store, first = MemoryStepStore(), MemorySink("run-1", 0)
    outcome = await _loop(ScriptedModel([call])).run(
        _run(), lead, StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]), first, store)
    assert outcome == Suspend("tool-calls") and outcome.wire == "suspended"
    [saved] = store.saved
    [req] = saved.children
    assert (req.tool_call_id, req.agent_id, req.prompt) == ("k1", "helper-agent", "go")
    assert store.tools == {}  # nothing ran inline
    assert saved.state["sub_agent_calls"] == [{"toolCallId": "k1", "toolName": "agent-helper", "args": {"prompt": "go"}}]
    assert [c["type"] for c in first.chunks][-2:] == ["tool-call", "step-finish"]  # no result, no finish
    assert first.chunks[-1]["payload"]["stepResult"]["isContinued"] is True
    # the orchestrator stored the child's outcome as the tool result; the next step starts with it
    store2 = MemoryStepStore()
    store2.tools["k1"] = ({"text": "child says hi"}, None)
    model = ScriptedModel([{"type": "text-delta", "payload": {"text": "thanks"}}])
    sink = MemorySink("run-1", 1)
    outcome2 = await _loop(model).run(_run(step=1, state=RunState.of(saved.state)), lead,
                                      StepInputs(attempt=1, seq_base=0, restarted=False), sink, store2)
    assert not isinstance(outcome2, Continue | Suspend)
    assert [c["type"] for c in sink.chunks][:2] == ["tool-result", "step-start"]
    assert sink.chunks[0]["payload"]["result"] == {"text": "child says hi"}
    assert "child says hi" in str(model.prompts[0])
    assert "sub_agent_calls" not in store2.saved[0].state
    assert store2.saved[0].state["steps"][0]["toolResults"][0]["result"] == {"text": "child says hi"}


async def test_tool_hooks_wrap_a_sub_agent_call() -> None:
    # Mastra wraps every tool with the hooks, sub-agents too; the metadata names the agent
    seen: list[tuple[str, Any]] = []

    def before(ctx: Any) -> Any:
        seen.append(("before", ctx.metadata["agentName"]))
        return {"proceed": False, "output": {"text": "skipped"}} if ctx.input["prompt"] == "skip" else None

    def after(ctx: Any) -> None:
        seen.append(("after", ctx.output))

    lead = Agent(id="lead", name="Lead", agents={"helper": helper},
                 hooks={"before_tool_call": before, "after_tool_call": after})
    skip = {"type": "tool-call", "payload": {"toolCallId": "k1", "toolName": "agent-helper", "args": {"prompt": "skip"}}}
    store, sink = MemoryStepStore(), MemorySink("run-1", 0)
    outcome = await _loop(ScriptedModel([skip])).run(
        _run(), lead, StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]), sink, store)
    assert outcome == Continue("tool-calls") and not store.saved[0].children  # no child run
    assert store.tools["k1"] == ({"text": "skipped"}, None)
    assert next(c for c in sink.chunks if c["type"] == "tool-result")["payload"]["result"] == {"text": "skipped"}
    assert seen == [("before", "Lead")]  # a skipped call gets no afterToolCall (Mastra)
    seen.clear()
    go = {"type": "tool-call", "payload": {"toolCallId": "k2", "toolName": "agent-helper", "args": {"prompt": "go"}}}
    store = MemoryStepStore()
    outcome = await _loop(ScriptedModel([go])).run(
        _run(), lead, StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]), MemorySink("run-1", 0), store)
    assert outcome == Suspend("tool-calls") and seen == [("before", "Lead")]
    store2 = MemoryStepStore()
    store2.tools["k2"] = ({"text": "child says hi"}, None)
    await _loop(ScriptedModel([{"type": "text-delta", "payload": {"text": "ok"}}])).run(
        _run(step=1, state=RunState.of(store.saved[0].state)), lead, StepInputs(attempt=1, seq_base=0, restarted=False),
        MemorySink("run-1", 1), store2)
    assert seen == [("before", "Lead"), ("after", {"text": "child says hi"})]  # once the child ended


async def test_a_tool_skipped_by_before_tool_call_gets_no_after_tool_call() -> None:
    # Mastra's wrapToolWithHooks returns the skip's output at once: afterToolCall is not called
    from types import SimpleNamespace

    from threadline.runtime.step.tools import run_tool_call
    from threadline.runtime.tools import ToolContext, ToolHooks, create_tool

    seen: list[str] = []
    hooks = ToolHooks(before_tool_call=lambda ctx: {"proceed": False, "output": {"sum": 42}},
                      after_tool_call=lambda ctx: seen.append("after"))
    ctx = ToolContext(tool_call_id="c1", run_id="run-1", thread_id="th-1", resource_id="res-1", agent_id="a",
                      step=0, idempotency_key="run-1:c1", writer=SimpleNamespace())
    tool = create_tool(id="add", description="", execute=lambda _a: {"sum": 2})
    out = await run_tool_call(call={"toolName": "add", "toolCallId": "c1", "args": {}}, tools={"add": tool},
                              hooks=hooks, context=ctx, agent_meta={})
    assert out == ({"sum": 42}, None) and seen == []


async def test_a_skipped_sub_agent_call_reads_as_mastra_s_model_output() -> None:
    # Mastra's sub-agent tool maps its output with toModelOutput: the model reads the text alone
    # (the plain string "skipped", not {"text": "skipped"} as JSON), and the tool-result chunk and
    # the stored part carry providerMetadata.mastra.modelOutput
    from threadline.runtime.messages import to_core

    lead = Agent(id="lead", agents={"helper": helper},
                 hooks={"before_tool_call": lambda ctx: {"proceed": False, "output": {"text": "skipped"}}})
    skip = {"type": "tool-call", "payload": {"toolCallId": "k1", "toolName": "agent-helper", "args": {"prompt": "x"}}}
    store, sink = MemoryStepStore(), MemorySink("run-1", 0)
    await _loop(ScriptedModel([skip])).run(
        _run(), lead, StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]), sink, store)
    meta = {"mastra": {"modelOutput": {"type": "text", "value": "skipped"}}}
    result = next(c for c in sink.chunks if c["type"] == "tool-result")["payload"]
    assert result["result"] == {"text": "skipped"} and result["providerMetadata"] == meta
    [answer] = [m for m, _ in store.saved[0].entries if m["role"] == "assistant"]
    [part] = [p for p in answer["content"]["parts"] if p["type"] == "tool-invocation"]
    assert part["providerMetadata"] == meta
    assert [m["content"] for m in to_core([answer]) if m["role"] == "tool"] == ["skipped"]


def test_a_plain_tool_result_reads_as_json_and_carries_no_model_output() -> None:
    from threadline.runtime.sub_agent_names import model_output, sub_agent_model_output

    assert model_output("add", {"text": "x"}) == {"text": "x"}
    assert sub_agent_model_output("plain") == {"type": "text", "value": "plain"}
    assert sub_agent_model_output({"other": 1}) == {"type": "text", "value": ""}
    assert sub_agent_model_output(None) is None

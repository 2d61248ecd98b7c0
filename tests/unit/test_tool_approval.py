"""Tool approval (decisions 225-227), the pure parts and the step loop in memory: which calls are
held, the orchestrator's verdict on an answer, the step suspending with Mastra's
``tool-call-approval`` chunk, and the resumed step running an approved call once or telling the
model a declined one's reason."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_step_loop import SIGNAL, _loop, _run
from threadline.events.approval_chunks import APPROVAL_RESUME_SCHEMA, DEFAULT_DECLINE_REASON, decline_reason
from threadline.orchestration.approvals import Answer, on_answer
from threadline.runtime import Agent, create_tool
from threadline.runtime.messages import MessageList
from threadline.runtime.step.ports import Continue, RunState, StepInputs, StepRun, Suspend
from threadline.runtime.step.tools import needs_approval
from threadline.testing import MemorySink, MemoryStepStore, ScriptedModel

pytestmark = pytest.mark.unit

ran: list[int] = []


def _add(input: dict[str, Any]) -> dict[str, Any]:
    ran.append(1)
    return {"sum": input["a"] + input["b"]}


gated = create_tool(id="add", description="Add.", execute=_add, require_approval=True)
plain = create_tool(id="add", description="Add.", execute=_add)
CALL = {"type": "tool-call", "payload": {"toolCallId": "c1", "toolName": "add", "args": {"a": 2, "b": 3}}}


def test_which_calls_wait_for_approval() -> None:
    assert needs_approval(gated, run_option=False) and needs_approval(plain, run_option=True)
    assert not needs_approval(plain, run_option=False)
    assert not needs_approval(None, run_option=True)  # an unknown tool fails as Mastra's, it is not held


def test_the_decline_reason_defaults_to_mastras() -> None:
    assert decline_reason(None) == decline_reason("  ") == DEFAULT_DECLINE_REASON
    assert decline_reason("no") == "no"


RUN = {"resource_id": "res", "thread_id": "th", "status": "running", "waiting_children": True}


@pytest.mark.parametrize(("run", "call", "who", "approved", "expected"), [
    (RUN, {"status": "pending"}, ("res", "th"), True, Answer(True, "approved")),
    (RUN, {"status": "pending"}, ("res", "th"), False, Answer(True, "declined")),
    # an answer seen before the orchestrator applied the suspended step is recorded too
    ({**RUN, "waiting_children": False}, {"status": "pending"}, ("res", "th"), True, Answer(True, "approved")),
    (RUN, {"status": "approved"}, ("res", "th"), True, Answer(False, "approved")),  # twice: once
    (RUN, {"status": "declined"}, ("res", "th"), True, Answer(False, "declined")),  # the first answer stands
    (RUN, {"status": "pending"}, ("other", "th"), True, Answer(False, "unknown")),  # tenancy
    (RUN, {"status": "pending"}, ("res", "th2"), True, Answer(False, "unknown")),
    (RUN, None, ("res", "th"), True, Answer(False, "unknown")),
    (None, None, ("res", "th"), True, Answer(False, "unknown")),
    ({**RUN, "status": "aborted"}, {"status": "pending"}, ("res", "th"), True, Answer(False, "pending")),
])
def test_the_verdict_on_an_answer(run: Any, call: Any, who: tuple[str, str], approved: bool,
                                  expected: Answer) -> None:
    assert on_answer(run, call, resource_id=who[0], thread_id=who[1], approved=approved) == expected


async def _held(agent: Agent, run: StepRun | None = None) -> tuple[MemoryStepStore, MemorySink, Any]:
    store, sink = MemoryStepStore(), MemorySink("run-1", 0)
    outcome = await _loop(ScriptedModel([CALL])).run(
        run or _run(), agent, StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]), sink, store)
    return store, sink, outcome


async def test_a_gated_call_suspends_the_step_before_the_tool_runs() -> None:
    ran.clear()
    store, sink, outcome = await _held(Agent(id="a", tools=[gated]))
    assert outcome == Suspend("tool-calls") and ran == []
    assert store.held == {"c1": ("pending", None)}  # recorded before its chunk went out
    kinds = [c["type"] for c in sink.chunks]
    assert kinds[-3:] == ["tool-call", "tool-call-approval", "step-finish"]
    approval = sink.chunks[-2]
    assert approval["payload"] == {"toolCallId": "c1", "toolName": "add", "args": {"a": 2, "b": 3},
                                   "resumeSchema": APPROVAL_RESUME_SCHEMA}
    [saved] = store.saved
    assert saved.approvals == [{"toolCallId": "c1", "toolName": "add", "args": {"a": 2, "b": 3}}]
    assert saved.state["approval_calls"] == saved.approvals and "finish" not in kinds


async def test_the_call_option_holds_a_tool_that_does_not_ask() -> None:
    run = _run()
    run.options = {"require_tool_approval": True}
    _, _, outcome = await _held(Agent(id="a", tools=[plain]), run)
    assert isinstance(outcome, Suspend)
    _, _, outcome = await _held(Agent(id="a", tools=[plain]))
    assert isinstance(outcome, Continue)


async def _resumed(saved_state: Any, status: str, reason: str | None = None,
                   done: Any = None) -> tuple[MemoryStepStore, MemorySink, ScriptedModel]:
    store, sink = MemoryStepStore(), MemorySink("run-1", 1)
    store.held["c1"] = (status, reason)
    if done is not None:
        store.tools["c1"] = done
    model = ScriptedModel([{"type": "text-delta", "payload": {"text": "ok"}}])
    await _loop(model).run(_run(step=1, state=RunState.of(saved_state)), Agent(id="a", tools=[gated]),
                           StepInputs(attempt=1, seq_base=0, restarted=False), sink, store)
    return store, sink, model


async def test_an_approved_call_runs_once_at_the_resumed_step() -> None:
    store, _, _ = await _held(Agent(id="a", tools=[gated]))
    ran.clear()
    store2, sink, model = await _resumed(store.saved[0].state, "approved")
    assert ran == [1] and store2.tools["c1"] == ({"sum": 5}, None)
    assert [c["type"] for c in sink.chunks][:2] == ["tool-result", "step-start"]
    assert '{"sum":5}' in str(model.prompts[0])
    ml = MessageList.from_state(store2.saved[0].state["message_list"], thread_id="th", resource_id="res")
    invocation = next(p["toolInvocation"] for m in ml.get.all.db() for p in m["content"]["parts"]
                      if p.get("type") == "tool-invocation")
    assert invocation["state"] == "result" and invocation["approval"] == {"id": "c1", "approved": True}
    assert "approval_calls" not in store2.saved[0].state
    ran.clear()  # a re-execution after the tool ran reuses its stored result: it never runs twice
    await _resumed(store.saved[0].state, "approved", done=({"sum": 5}, None))
    assert ran == []


async def test_a_declined_call_never_runs_and_the_model_reads_the_reason() -> None:
    store, _, _ = await _held(Agent(id="a", tools=[gated]))
    ran.clear()
    store2, sink, model = await _resumed(store.saved[0].state, "declined", "Not today")
    assert ran == [] and "c1" not in store2.tools
    denied = sink.chunks[0]
    assert denied["type"] == "tool-output-denied" and denied["payload"] == {
        "toolCallId": "c1", "toolName": "add", "args": {"a": 2, "b": 3},
        "approval": {"id": "c1", "approved": False, "reason": "Not today"}}
    tool_message = [m for m in model.prompts[0] if m.get("role") == "tool"]
    assert tool_message == [{"role": "tool", "tool_call_id": "c1", "content": "Not today"}]
    # a call with no answer at the resume (never expected) is declined, the model never left unanswered
    _, sink3, model3 = await _resumed(store.saved[0].state, "pending")
    assert sink3.chunks[0]["payload"]["approval"]["reason"] == DEFAULT_DECLINE_REASON
    assert [m for m in model3.prompts[0] if m.get("role") == "tool"][0]["content"] == DEFAULT_DECLINE_REASON


async def test_a_run_output_ends_where_its_run_waits_for_approval_as_mastras_stream() -> None:
    from threadline.client.run_output import RunOutput

    def c(seq: int, kind: str, step: int = 0, run: str = "r") -> dict[str, Any]:
        return {"type": kind, "runId": run, "step": step, "attempt": 1, "seq": seq, "payload": {}}

    thread = [c(0, "start"), c(1, "tool-call"), c(2, "step-finish", run="other"), c(3, "tool-call-approval"),
              c(4, "step-finish"), c(5, "tool-result", 1), c(6, "finish", 1)]
    seen: list[dict[str, int]] = []

    class Source:
        def __init__(self, after: dict[str, int]) -> None:
            self.after = after

        @property
        def stream(self) -> Any:
            async def gen() -> Any:
                for chunk in thread:
                    if chunk["seq"] > self.after.get(chunk["runId"], -1):
                        yield chunk
            return gen()

        async def unsubscribe(self) -> None:
            return None

    async def open_sub(from_ms: int, after: dict[str, int]) -> Source:
        seen.append(dict(after))
        return Source(after)

    out = RunOutput("r", open_sub, 0)
    held = await out.consume_stream()
    assert [x["type"] for x in held] == ["start", "tool-call", "tool-call-approval", "step-finish"]
    assert await out.finish_reason() == "suspended"
    # the answer's output: what the run streams after what it streamed before the answer
    rest = await RunOutput("r", open_sub, 0, after_seq=4).consume_stream()
    assert [x["type"] for x in rest] == ["tool-result", "finish"] and seen[-1] == {"r": 4}

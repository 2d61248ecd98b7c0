"""The step loop on its ports, in memory: a step runs against a StepStore, a ChunkSink and a
model function that are plain Python objects here (the worker plugs in PostgreSQL and Kafka)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from threadline.errors import ModelCallError, StaleWriterError
from threadline.runtime import Agent, create_tool
from threadline.runtime.step.conclude import continues
from threadline.runtime.step.loop import StepLoop
from threadline.runtime.step.ports import (
    Continue,
    Fail,
    Finish,
    RunState,
    Signal,
    StepInputs,
    StepRun,
)
from threadline.testing import MemorySink, MemoryStepStore, ScriptedModel, text_delta

pytestmark = pytest.mark.unit


def _run(step: int = 0, state: RunState | None = None) -> StepRun:
    return StepRun(run_id="run-1", resource_id="res", thread_id="th", agent_id="a", epoch=1, step=step, next_seq=0,
                   options={}, state=state or RunState())


def _loop(model: Any) -> StepLoop:
    return StepLoop(default_model="openai/threadline-test", model_api_base=None, model_timeout_s=5, model=model)


SIGNAL = Signal("sig-1", {"id": "sig-1", "type": "user", "tagName": "user", "contents": "hello",
                          "attributes": {}, "metadata": {}, "createdAt": "2026-01-01T00:00:00Z"})


async def test_a_one_step_run_streams_answers_and_saves_once() -> None:
    model = ScriptedModel([{"type": "text-delta", "payload": {"text": "hi "}},
                      {"type": "text-delta", "payload": {"text": "there"}}])
    sink, store = MemorySink("run-1", 0), MemoryStepStore()
    agent = Agent(id="a", instructions="be brief")
    outcome = await _loop(model).run(_run(), agent, StepInputs(attempt=1, seq_base=0, restarted=False,
                                                                signals=[SIGNAL]), sink, store)
    assert outcome == Finish("stop")
    assert [c["type"] for c in sink.chunks] == ["start", "data-user-message", "step-start", "text-delta",
                                                "text-delta", "step-finish", "finish"]
    assert all(c["from"] == "AGENT" for c in sink.chunks if c["type"] != "data-user-message")
    assert model.prompts[0][0] == {"role": "system", "content": "be brief"}
    assert model.prompts[0][-1]["role"] == "user"
    [saved] = store.saved
    assert saved.outcome == outcome and saved.consumed == ["sig-1"] and saved.text == "hi there"
    assert saved.next_seq == sink.seq and saved.usage == {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}
    # a signal of type user that is not the call's own message is stored as Mastra's role "signal"
    assert [m["role"] for m, source in saved.entries if source in ("input", "response")] == ["signal", "assistant"]
    assert saved.state["steps"][0]["text"] == "hi there" and saved.state["message_list"] is not None


async def test_a_held_finish_is_saved_with_the_step_then_counted_as_stored() -> None:
    sink, store = MemorySink("run-1", 0, hold_finish=True), MemoryStepStore()
    outcome = await _loop(ScriptedModel([text_delta("hi")])).run(
        _run(), Agent(id="a"), StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]), sink, store)
    assert outcome == Finish("stop")
    [saved] = store.saved
    assert saved.finish is not None and saved.finish["type"] == "finish"  # stored with the result (decision 19)
    assert saved.finish["seq"] == saved.next_seq - 1
    assert sink.held is None and sink.finished  # the port was told: finish_stored()


async def test_a_held_finish_stays_held_when_the_save_is_fenced_off() -> None:
    sink, store = MemorySink("run-1", 0, hold_finish=True), MemoryStepStore(owner=False)
    with pytest.raises(StaleWriterError):
        await _loop(ScriptedModel([text_delta("hi")])).run(
            _run(), Agent(id="a"), StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]), sink, store)
    assert sink.held is not None and not sink.finished  # for the worker to drop (drop_held)
    sink.drop_held()
    assert sink.held is None and sink.seq == sink.chunks[-1]["seq"] + 1 and "finish" not in sink.types()


@pytest.mark.parametrize(("results", "children", "pending", "step_no", "expected"), [
    (True, False, False, 0, True), (True, False, False, 4, False),  # tool results, within max_steps (5)
    (False, False, True, 0, True), (False, False, True, 4, False),  # signals pending
    (False, True, False, 4, True),  # waiting for child runs: always (the step suspends)
    (False, False, False, 0, False),
])
def test_the_continuation_rule(results: bool, children: bool, pending: bool, step_no: int, expected: bool) -> None:
    assert continues(results=results, children=children, pending=pending, step_no=step_no, max_steps=5) is expected


class Lookup(BaseModel):
    customer: str


def _lookup_agent(ran: list[str]) -> Agent:
    """An agent whose one tool, ``lookup``, appends the customer it was called for to ``ran``."""
    async def lookup(input: Lookup, context: Any) -> dict[str, str]:
        ran.append(input.customer)
        return {"plan": "paid"}

    return Agent(id="a", tools=[create_tool(id="lookup", description="find", input_schema=Lookup, execute=lookup)])


def _lookup_call(i: int) -> dict[str, Any]:
    return {"type": "tool-call", "payload": {"toolCallId": f"c{i}", "toolName": "lookup", "args": {"customer": f"C-{i}"}}}


async def test_a_tool_call_records_the_output_runs_the_tool_once_and_continues() -> None:
    ran: list[str] = []
    agent = _lookup_agent(ran)
    model = ScriptedModel([_lookup_call(1)])
    sink, store = MemorySink("run-1", 0), MemoryStepStore()
    outcome = await _loop(model).run(_run(), agent, StepInputs(attempt=1, seq_base=0, restarted=False), sink, store)
    assert outcome == Continue("tool-calls")
    assert ran == ["C-1"] and store.tools == {"c1": ({"plan": "paid"}, None)}
    assert [o["finish_reason"] for o in store.outputs] == ["tool-calls"]  # recorded before the tool ran
    assert [c["type"] for c in sink.chunks][-2:] == ["tool-result", "step-finish"]
    assert store.saved[0].outcome == outcome and store.saved[0].text is None


async def test_a_tool_step_confirms_its_owner_in_the_record_and_asks_again_before_each_later_tool() -> None:
    # decision 88: the record returns the calls that ran and confirms the owner (no separate
    # reads before the first tool); a step with tool results continues without asking for signals
    ran: list[str] = []
    agent = _lookup_agent(ran)
    calls = [_lookup_call(i) for i in (1, 2)]
    store = MemoryStepStore()
    outcome = await _loop(ScriptedModel(calls)).run(_run(), agent, StepInputs(attempt=1, seq_base=0, restarted=False),
                                               MemorySink("run-1", 0), store)
    assert outcome == Continue("tool-calls") and ran == ["C-1", "C-2"]
    assert store.asked == ["still_owner"]  # before the second tool only


async def test_a_tool_step_whose_record_is_fenced_out_runs_no_tool() -> None:
    ran: list[str] = []
    agent = _lookup_agent(ran)
    model = ScriptedModel([_lookup_call(1)])
    store = MemoryStepStore(owner=False)
    with pytest.raises(StaleWriterError):
        await _loop(model).run(_run(), agent, StepInputs(attempt=1, seq_base=0, restarted=False),
                               MemorySink("run-1", 0), store)
    assert ran == [] and store.tools == {} and store.saved == []


async def test_a_text_step_asks_for_pending_signals_before_it_finishes() -> None:
    model = ScriptedModel([{"type": "text-delta", "payload": {"text": "hi"}}])
    store = MemoryStepStore(pending=["sig-9"])
    outcome = await _loop(model).run(_run(), Agent(id="a"), StepInputs(attempt=1, seq_base=0, restarted=False),
                                     MemorySink("run-1", 0), store)
    assert store.asked == ["more_pending"] and outcome == Continue("stop")


async def test_a_model_error_fails_the_run_with_error_and_finish() -> None:
    model = ScriptedModel(ModelCallError("boom", kind="bad_request", retryable=False))
    sink, store = MemorySink("run-1", 0), MemoryStepStore()
    outcome = await _loop(model).run(_run(), Agent(id="a"), StepInputs(attempt=1, seq_base=0, restarted=False),
                                     sink, store)
    assert isinstance(outcome, Fail) and outcome.error["kind"] == "bad_request" and outcome.wire == "failed"
    assert [c["type"] for c in sink.chunks][-3:] == ["error", "step-finish", "finish"]
    assert store.saved[0].outcome == outcome


async def test_a_later_step_continues_the_stored_message_list() -> None:
    first = MemoryStepStore()
    await _loop(ScriptedModel([{"type": "text-delta", "payload": {"text": "one"}}])).run(
        _run(), Agent(id="a"), StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]),
        MemorySink("run-1", 0), first)
    state = RunState.of(first.saved[0].state)
    model = ScriptedModel([{"type": "text-delta", "payload": {"text": "two"}}])
    more = Signal("sig-2", {**SIGNAL.payload, "id": "sig-2", "contents": "and more"})
    store = MemoryStepStore()
    outcome = await _loop(model).run(_run(step=1, state=state), Agent(id="a"),
                                     StepInputs(attempt=1, seq_base=0, restarted=False, signals=[more]),
                                     MemorySink("run-1", 1), store)
    assert outcome == Finish("stop")
    users = [m["content"] for m in model.prompts[0] if m["role"] == "user"]
    assert users == ["hello", "and more"]
    assert [s["text"] for s in store.saved[0].state["steps"]] == ["one", "two"]


def test_run_state_round_trips_and_omits_an_unset_system_snapshot() -> None:
    stored = {"version": 1, "message_list": {"entries": []}, "response_message_id": "msg-1", "retry_count": 2,
              "processor_state": {"p": {"n": 1}}, "steps": [{"stepNumber": 0}], "usage": {"totalTokens": 4}}
    state = RunState.of(stored)
    assert state.dump() == stored
    state.processor_state["p"]["n"] = 2
    assert stored["processor_state"] == {"p": {"n": 1}}  # the stored dict is not shared
    assert RunState.of(None).dump()["steps"] == [] and "system_snapshot" not in RunState.of({}).dump()


def test_run_state_copies_what_json_cannot_carry_deeply() -> None:
    stored = {"processor_state": {"p": {"seen": {1, 2}}}, "steps": [{"stepNumber": 0}]}  # a set: not JSON
    state = RunState.of(stored)
    state.processor_state["p"]["seen"].add(3)
    state.steps[0]["stepNumber"] = 5
    assert stored == {"processor_state": {"p": {"seen": {1, 2}}}, "steps": [{"stepNumber": 0}]}


def _untimed(value: Any) -> Any:
    """``value`` without its ``createdAt`` keys."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k != "createdAt"}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


async def test_a_step_continued_from_memory_sees_what_a_step_read_from_the_store_sees() -> None:
    """Decision 102: the next step on the same worker goes on with the stored step's own objects
    (``RunState.carried``); its prompt, chunks and stored state are those of a step that decoded
    the stored JSON, and the stored snapshot is not changed by it."""
    ran: list[str] = []
    first = MemoryStepStore()
    await _loop(ScriptedModel([_lookup_call(1)])).run(
        _run(), _lookup_agent(ran), StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]),
        MemorySink("run-1", 0), first)
    dumped = first.saved[0].state
    snapshot = orjson.loads(orjson.dumps(dumped))
    seen = []
    for state in (RunState.of(dumped), RunState.carried(dumped)):
        model = ScriptedModel([{"type": "text-delta", "payload": {"text": "two"}}])
        sink, store = MemorySink("run-1", 1), MemoryStepStore()
        outcome = await _loop(model).run(_run(step=1, state=state), _lookup_agent(ran),
                                         StepInputs(attempt=1, seq_base=0, restarted=False), sink, store)
        saved = _untimed(orjson.loads(orjson.dumps(store.saved[0].state)))  # parts' createdAt: when stored
        chunks = [{**c, "payload": {k: v for k, v in (c.get("payload") or {}).items() if k != "startedAt"}}
                  for c in sink.chunks]
        seen.append((outcome, model.prompts[0], chunks, saved))
    assert seen[0] == seen[1] and seen[0][0] == Finish("stop")
    assert [m["role"] for m in seen[0][1]][-2:] == ["assistant", "tool"]  # the call and its result
    assert orjson.loads(orjson.dumps(dumped)) != snapshot  # the live step went on with the same objects
    assert RunState.carried(dumped).live and not RunState.of(dumped).live

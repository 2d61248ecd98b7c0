"""The step loop on its ports, in memory: a step runs against a StepStore, a ChunkSink and a
model function that are plain Python objects here (the worker plugs in PostgreSQL and Kafka)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from threadline.errors import ModelCallError, StaleWriterError
from threadline.runtime import Agent, create_tool
from threadline.runtime.model.llm import ModelOutcome
from threadline.runtime.step.loop import StepLoop
from threadline.runtime.step.ports import (
    Continue,
    Fail,
    Finish,
    RunState,
    Signal,
    StepInputs,
    StepRecord,
    StepRun,
)

pytestmark = pytest.mark.unit


class MemorySink:
    """A ChunkSink that keeps the chunks."""

    def __init__(self, run_id: str, step: int, attempt: int = 1, seq: int = 0) -> None:
        self.run_id, self.step, self.attempt, self.seq, self.finished = run_id, step, attempt, seq, False
        self.chunks: list[dict[str, Any]] = []
        self.flushed = 0

    async def emit(self, chunk: dict[str, Any]) -> dict[str, Any]:
        chunk = {**chunk, "runId": self.run_id, "step": self.step, "attempt": self.attempt, "seq": self.seq}
        self.seq += 1
        self.finished = self.finished or chunk["type"] == "finish"
        self.chunks.append(chunk)
        return chunk

    async def flush(self) -> None:
        self.flushed += 1


class MemoryStore:
    """A StepStore that records what the loop saves."""

    def __init__(self, pending: list[str] | None = None, *, owner: bool = True) -> None:
        self.saved: list[StepRecord] = []
        self.outputs: list[dict[str, Any]] = []
        self.tools: dict[str, tuple[Any, str | None]] = {}
        self.pending = pending or []
        self.owner = owner  # False: another worker took the step over
        self.asked: list[str] = []  # the reads and checks the loop made, in order

    async def begin(self, run_id: str, *, step: int, epoch: int, takeover_from: Any = None) -> Any:
        raise AssertionError("the loop never claims")

    async def save(self, record: StepRecord) -> None:
        if not self.owner:  # fenced, as every write of an attempt that lost the step
            raise StaleWriterError(record.run.run_id, record.run.epoch)
        self.saved.append(record)

    async def record_model_output(self, run: StepRun, attempt: int, output: dict[str, Any],
                                  call_ids: Sequence[str] = ()) -> dict[str, tuple[Any, str | None]]:
        if not self.owner:
            raise StaleWriterError(run.run_id, run.epoch)
        self.outputs.append(output)
        return {k: v for k, v in self.tools.items() if k in call_ids}

    async def restart_attempt(self, run: StepRun, attempt: int, retry_count: int) -> None:
        raise AssertionError("no retry expected")

    async def tool_results(self, run: StepRun, call_ids: list[str]) -> dict[str, tuple[Any, str | None]]:
        self.asked.append("tool_results")
        return {k: v for k, v in self.tools.items() if k in call_ids}

    async def save_tool_result(self, run: StepRun, call_id: str, tool_name: str, result: Any,
                               error: str | None) -> None:
        self.tools[call_id] = (result, error)

    async def still_owner(self, run: StepRun, attempt: int) -> bool:
        self.asked.append("still_owner")
        return self.owner

    async def more_pending(self, run: StepRun, exclude: list[str]) -> bool:
        self.asked.append("more_pending")
        return any(p not in exclude for p in self.pending)


def scripted(*responses: list[dict[str, Any]] | Exception) -> Any:
    """A model function answering each call with the next scripted response."""
    queue = list(responses)
    prompts: list[list[dict[str, Any]]] = []

    async def model(*, messages: list[dict[str, Any]], outcome: ModelOutcome,
                    **_: Any) -> AsyncIterator[dict[str, Any]]:
        prompts.append(messages)
        response = queue.pop(0)
        if isinstance(response, Exception):
            raise response
        for chunk in response:
            if chunk["type"] == "text-delta":
                outcome.text += chunk["payload"]["text"]
            if chunk["type"] == "tool-call":
                outcome.tool_calls.append(chunk["payload"])
            yield dict(chunk)
        outcome.finish_reason = "tool-calls" if outcome.tool_calls else "stop"
        outcome.usage = {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}

    model.prompts = prompts  # type: ignore[attr-defined]  # read by the tests
    return model


def _run(step: int = 0, state: RunState | None = None) -> StepRun:
    return StepRun(run_id="run-1", resource_id="res", thread_id="th", agent_id="a", epoch=1, step=step, next_seq=0,
                   options={}, state=state or RunState())


def _loop(model: Any) -> StepLoop:
    return StepLoop(default_model="openai/threadline-test", model_api_base=None, model_timeout_s=5, model=model)


SIGNAL = Signal("sig-1", {"id": "sig-1", "type": "user", "tagName": "user", "contents": "hello",
                          "attributes": {}, "metadata": {}, "createdAt": "2026-01-01T00:00:00Z"})


async def test_a_one_step_run_streams_answers_and_saves_once() -> None:
    model = scripted([{"type": "text-delta", "payload": {"text": "hi "}},
                      {"type": "text-delta", "payload": {"text": "there"}}])
    sink, store = MemorySink("run-1", 0), MemoryStore()
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
    assert [m["role"] for m, source in saved.entries if source in ("input", "response")] == ["user", "assistant"]
    assert saved.state["steps"][0]["text"] == "hi there" and saved.state["message_list"] is not None


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
    model = scripted([_lookup_call(1)])
    sink, store = MemorySink("run-1", 0), MemoryStore()
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
    store = MemoryStore()
    outcome = await _loop(scripted(calls)).run(_run(), agent, StepInputs(attempt=1, seq_base=0, restarted=False),
                                               MemorySink("run-1", 0), store)
    assert outcome == Continue("tool-calls") and ran == ["C-1", "C-2"]
    assert store.asked == ["still_owner"]  # before the second tool only


async def test_a_tool_step_whose_record_is_fenced_out_runs_no_tool() -> None:
    ran: list[str] = []
    agent = _lookup_agent(ran)
    model = scripted([_lookup_call(1)])
    store = MemoryStore(owner=False)
    with pytest.raises(StaleWriterError):
        await _loop(model).run(_run(), agent, StepInputs(attempt=1, seq_base=0, restarted=False),
                               MemorySink("run-1", 0), store)
    assert ran == [] and store.tools == {} and store.saved == []


async def test_a_text_step_asks_for_pending_signals_before_it_finishes() -> None:
    model = scripted([{"type": "text-delta", "payload": {"text": "hi"}}])
    store = MemoryStore(pending=["sig-9"])
    outcome = await _loop(model).run(_run(), Agent(id="a"), StepInputs(attempt=1, seq_base=0, restarted=False),
                                     MemorySink("run-1", 0), store)
    assert store.asked == ["more_pending"] and outcome == Continue("stop")


async def test_a_model_error_fails_the_run_with_error_and_finish() -> None:
    model = scripted(ModelCallError("boom", kind="bad_request", retryable=False))
    sink, store = MemorySink("run-1", 0), MemoryStore()
    outcome = await _loop(model).run(_run(), Agent(id="a"), StepInputs(attempt=1, seq_base=0, restarted=False),
                                     sink, store)
    assert isinstance(outcome, Fail) and outcome.error["kind"] == "bad_request" and outcome.wire == "failed"
    assert [c["type"] for c in sink.chunks][-3:] == ["error", "step-finish", "finish"]
    assert store.saved[0].outcome == outcome


async def test_a_later_step_continues_the_stored_message_list() -> None:
    first = MemoryStore()
    await _loop(scripted([{"type": "text-delta", "payload": {"text": "one"}}])).run(
        _run(), Agent(id="a"), StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]),
        MemorySink("run-1", 0), first)
    state = RunState.of(first.saved[0].state)
    model = scripted([{"type": "text-delta", "payload": {"text": "two"}}])
    more = Signal("sig-2", {**SIGNAL.payload, "id": "sig-2", "contents": "and more"})
    store = MemoryStore()
    outcome = await _loop(model).run(_run(step=1, state=state), Agent(id="a"),
                                     StepInputs(attempt=1, seq_base=0, restarted=False, signals=[more]),
                                     MemorySink("run-1", 1), store)
    assert outcome == Finish("stop")
    users = [m["content"] for m in model.prompts[0] if m["role"] == "user"]
    assert users == ["hello", "and more"]
    assert [s["text"] for s in store.saved[0].state["steps"]] == ["one", "two"]


def test_run_state_round_trips_and_omits_an_unset_system_snapshot() -> None:
    stored = {"message_list": {"entries": []}, "response_message_id": "msg-1", "retry_count": 2,
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


async def test_a_step_continued_from_memory_sees_what_a_step_read_from_the_store_sees() -> None:
    """Decision 102: the next step on the same worker goes on with the stored step's own objects
    (``RunState.carried``); its prompt, chunks and stored state are those of a step that decoded
    the stored JSON, and the stored snapshot is not changed by it."""
    ran: list[str] = []
    first = MemoryStore()
    await _loop(scripted([_lookup_call(1)])).run(
        _run(), _lookup_agent(ran), StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]),
        MemorySink("run-1", 0), first)
    dumped = first.saved[0].state
    snapshot = orjson.loads(orjson.dumps(dumped))
    seen = []
    for state in (RunState.of(dumped), RunState.carried(dumped)):
        model = scripted([{"type": "text-delta", "payload": {"text": "two"}}])
        sink, store = MemorySink("run-1", 1), MemoryStore()
        outcome = await _loop(model).run(_run(step=1, state=state), _lookup_agent(ran),
                                         StepInputs(attempt=1, seq_base=0, restarted=False), sink, store)
        saved = orjson.loads(orjson.dumps(store.saved[0].state))
        chunks = [{**c, "payload": {k: v for k, v in (c.get("payload") or {}).items() if k != "startedAt"}}
                  for c in sink.chunks]
        seen.append((outcome, model.prompts[0], chunks, saved))
    assert seen[0] == seen[1] and seen[0][0] == Finish("stop")
    assert [m["role"] for m in seen[0][1]][-2:] == ["assistant", "tool"]  # the call and its result
    assert orjson.loads(orjson.dumps(dumped)) != snapshot  # the live step went on with the same objects
    assert RunState.carried(dumped).live and not RunState.of(dumped).live

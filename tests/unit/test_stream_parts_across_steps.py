"""``stream_parts`` across a run's steps, as Mastra's ``streamParts`` (decision 167): a later step's
processor sees the parts of the earlier steps this worker ran, the step starts and the text
boundaries too; a step run again replaces what it kept."""

from __future__ import annotations

from typing import Any

import pytest

from threadline.runtime import Agent, Processor
from threadline.runtime.step.loop import StepLoop
from threadline.runtime.step.ports import Continue, RunState, Signal, StepInputs, StepRun
from threadline.runtime.step.stream_parts import keep_step, parts_before
from threadline.testing import MemorySink, MemoryStepStore, ScriptedModel, text_delta

pytestmark = pytest.mark.unit

SIGNAL = Signal("sig-1", {"id": "sig-1", "type": "user", "tagName": "user", "contents": "1+1",
                          "attributes": {}, "metadata": {}, "createdAt": "2026-01-01T00:00:00Z"})
CALL = {"type": "tool-call", "payload": {"toolCallId": "c1", "toolName": "nothing", "args": {}}}


class PartsSeen(Processor):
    id = "parts-seen"

    def __init__(self) -> None:
        self.at_finish: list[str] = []

    async def process_output_stream(self, *, part: Any, stream_parts: Any, **_: Any) -> Any:
        if part.type == "finish":
            self.at_finish[:] = [p.type for p in stream_parts]  # the runner may call a copy
        return part


def _run(step: int, state: RunState) -> StepRun:
    return StepRun(run_id="run-1", resource_id="res", thread_id="th", agent_id="a", epoch=1, step=step, next_seq=0,
                   options={}, state=state)


def test_parts_before_joins_the_earlier_steps_and_keep_step_replaces_a_step_run_again() -> None:
    kept: dict[int, dict[str, list[str]]] = {}
    keep_step(kept, 0, {"p": ["a", "b"]}, {})
    seen = parts_before(kept, 1)
    seen["p"].append("c")
    keep_step(kept, 1, seen, {"p": 2})
    assert kept == {0: {"p": ["a", "b"]}, 1: {"p": ["c"]}} and parts_before(kept, 2) == {"p": ["a", "b", "c"]}
    keep_step(kept, 1, {"p": ["a", "b", "d"]}, {"p": 2})  # step 1 again: its first run is forgotten
    assert parts_before(kept, 2) == {"p": ["a", "b", "d"]}
    keep_step(kept, 0, {"p": ["x"]}, {})  # step 0 again: every later step with it
    assert kept == {0: {"p": ["x"]}}


async def test_a_later_steps_processor_sees_every_part_of_the_run() -> None:
    seen = PartsSeen()
    agent = Agent(id="a", output_processors=[seen])
    loop = StepLoop(default_model="openai/threadline-test", model_api_base=None, model_timeout_s=5,
                    model=ScriptedModel([CALL], [text_delta("2")]))
    first = MemoryStepStore()
    outcome = await loop.run(_run(0, RunState()), agent, StepInputs(attempt=1, seq_base=0, restarted=False,
                                                                    signals=[SIGNAL]), MemorySink("run-1", 0), first)
    assert isinstance(outcome, Continue)
    state = RunState.of(first.saved[0].state)
    await loop.run(_run(1, state), agent, StepInputs(attempt=1, seq_base=0, restarted=False),
                   MemorySink("run-1", 1), MemoryStepStore())
    types = seen.at_finish
    assert types[0] == "step-start" and "tool-call" in types and types.count("step-start") == 2
    assert types[types.index("step-finish") + 1:] == ["step-start", "text-delta", "finish"]  # the second step

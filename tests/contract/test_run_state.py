"""The stored run state is versioned: every layout ever shipped (one frozen fixture each, under
run_state/) is read by today's code, a state with no version reads as 1, and a newer layout is
refused with a clear error instead of being misread."""

from pathlib import Path

import orjson
import pytest

from threadline.errors import InvalidEventError
from threadline.runtime import Agent
from threadline.runtime.step.loop import StepLoop
from threadline.runtime.step.ports import (
    STATE_VERSION,
    STATE_VERSIONS,
    Finish,
    RunState,
    StateVersionError,
    StepInputs,
    state_version,
)
from threadline.testing import MemorySink, MemoryStepStore, ScriptedModel, step_run, text_delta

FIXTURES = Path(__file__).resolve().parent / "run_state"


def _fixture(name: str) -> dict:
    return orjson.loads((FIXTURES / name).read_bytes())


def test_every_version_is_described_and_has_a_frozen_fixture():
    assert set(STATE_VERSIONS) == set(range(1, STATE_VERSION + 1))
    assert {p.name for p in FIXTURES.glob("v*.json")} == {f"v{v}.json" for v in STATE_VERSIONS}


@pytest.mark.parametrize("name", ["unversioned.json", *(f"v{v}.json" for v in STATE_VERSIONS)])
def test_each_fixture_reads_and_is_stored_again_as_the_current_version(name: str):
    stored = _fixture(name)
    dumped = RunState.of(stored).dump()
    assert dumped["version"] == STATE_VERSION
    assert {k: v for k, v in dumped.items() if k != "version"} == {k: v for k, v in stored.items() if k != "version"}


@pytest.mark.parametrize("name", ["unversioned.json", *(f"v{v}.json" for v in STATE_VERSIONS)])
async def test_a_run_continues_from_each_fixture(name: str):
    model = ScriptedModel([text_delta("You are on pro.")])
    store = MemoryStepStore()
    loop = StepLoop(default_model="openai/test", model_api_base=None, model_timeout_s=5, model=model)
    outcome = await loop.run(step_run(step=1, state=RunState.of(_fixture(name))), Agent(id="support"),
                             StepInputs(attempt=1, seq_base=0, restarted=False), MemorySink("run-1", 1), store)
    assert outcome == Finish("stop")
    model.assert_all_used()
    prompt = model.prompts[0]
    assert prompt[0] == {"role": "system", "content": "be brief"}  # the step-0 snapshot, from the state
    assert any(m["role"] == "tool" for m in prompt)  # the stored tool result went back to the model
    assert [s["stepNumber"] for s in store.saved[0].state["steps"]] == [0, 1]


def test_a_state_with_no_version_reads_as_version_1():
    assert state_version({}) == 1 and state_version(_fixture("unversioned.json")) == 1


@pytest.mark.parametrize("version", [STATE_VERSION + 1, 0, "2", None, 1.0])
def test_an_unknown_version_is_refused_clearly(version: object):
    with pytest.raises(StateVersionError) as err:
        RunState.of({**_fixture(f"v{STATE_VERSION}.json"), "version": version})
    assert isinstance(err.value, InvalidEventError) and err.value.code == "state_version"  # dead-lettered, not retried
    assert f"run state version {version!r} is unknown to this worker" in str(err.value)

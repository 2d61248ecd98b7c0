"""Processor vectors P* (docs/cases.md) that are pure processor-runner logic (adapted per
docs/decisions.md where noted)."""

from __future__ import annotations

import pytest

from threadline._internal.attrdict import wrap
from threadline.errors import ConfigurationError
from threadline.runtime import MessageList, Processor, ProcessorRunner, TripWire, make_message
from threadline.runtime.processor_lists import resolve_list


def runner(*, input=(), output=(), error=()):
    return ProcessorRunner(input_processors=list(input), output_processors=list(output),
                           error_processors=list(error), states={})


def proc(pid, **methods):
    return type(f"P_{pid}", (Processor,), {"id": pid, **methods})()


def user(text, id=None):
    return make_message("user", [{"type": "text", "text": text}], id=id)


async def test_p3_messages_and_message_list_together_is_an_error():
    ml = MessageList()
    p = proc("p", process_input_step=lambda self, message_list, **_: {"messages": [], "message_list": message_list})
    with pytest.raises(ConfigurationError, match="both messages and message_list"):
        await runner(input=[p]).process_input_step(ml, {}, step_number=0, steps=[])


async def test_p4_returning_another_message_list_is_an_error():
    p = proc("p", process_input_step=lambda self, **_: MessageList())
    with pytest.raises(ConfigurationError, match="different MessageList"):
        await runner(input=[p]).process_input_step(MessageList(), {}, step_number=0, steps=[])


async def test_p5_array_merge_keeps_sources_and_removes_missing():
    ml = MessageList()
    ml.add(user("one", "m1"), "input")
    ml.add(user("two", "m2"), "memory")
    ml.add(user("three", "m3"), "input")
    new3 = user("THREE", "m3")
    p = proc("p", process_input_step=lambda self, messages, **_: [messages[0], new3])
    await runner(input=[p]).process_input_step(ml, {}, step_number=0, steps=[])
    assert [m.id for m in ml.get.all.db()] == ["m1", "m3"]
    assert ml.source_of("m3") == "input" and ml.get_by_id("m3").content.parts[0].text == "THREE"


async def test_p7_a_field_set_to_none_clears_it_and_absent_keeps_it():
    clear = proc("c", process_input_step=lambda self, **_: {"tool_choice": None})
    keep = proc("k", process_input_step=lambda self, **_: {})
    out = await runner(input=[keep]).process_input_step(MessageList(), {"tool_choice": "auto"}, step_number=0, steps=[])
    assert out["tool_choice"] == "auto"
    out = await runner(input=[clear]).process_input_step(MessageList(), {"tool_choice": "auto"}, step_number=0, steps=[])
    assert out["tool_choice"] is None


async def test_p8_model_settings_replaced_wholesale():
    p = proc("p", process_input_step=lambda self, **_: {"model_settings": {"temperature": 0.2}})
    out = await runner(input=[p]).process_input_step(MessageList(), {"model_settings": {"temperature": 1, "top_p": 0.9}},
                                                     step_number=0, steps=[])
    assert out["model_settings"] == {"temperature": 0.2}


async def test_p11_system_messages_replaced_then_system_entries_appended():
    ml = MessageList()
    ml.add_system("S1")
    u1 = user("u1", "u1")
    p = proc("p", process_input=lambda self, **_: {"messages": [u1, {"role": "system", "content": "X"}],
                                                    "system_messages": [{"role": "system", "content": "S9"}]})
    await runner(input=[p]).process_input(ml)
    assert [m.content for m in ml.get_system_messages()] == ["S9", "X"]
    assert [m.id for m in ml.get.all.db()] == ["u1"]


async def test_p12_unknown_ids_replace_the_input():
    ml = MessageList()
    ml.add(user("old", "o1"))
    p = proc("p", process_input=lambda self, **_: [user("new", "n1")])
    await runner(input=[p]).process_input(ml)
    assert [m.id for m in ml.get.all.db()] == ["n1"] and ml.source_of("n1") == "input"


async def test_p13_output_result_empty_list_removes_the_response():
    ml = MessageList()
    ml.add(user("q", "q1"))
    ml.add(make_message("assistant", [{"type": "text", "text": "a"}], id="r1"), "response")
    p = proc("p", process_output_result=lambda self, **_: [])
    await runner(output=[p]).process_output_result(ml, result={"text": "a"})
    assert [m.id for m in ml.get.all.db()] == ["q1"]


async def test_p15_a_crashing_stream_processor_passes_the_chunk_on_unchanged():
    seen = []

    def boom(self, part, **_):
        raise TypeError("bug")

    def record(self, part, **_):
        seen.append(part.payload.text)
        return part

    r = runner(output=[proc("a", process_output_stream=boom), proc("b", process_output_stream=record)])
    out = await r.process_output_stream(wrap({"type": "text-delta", "payload": {"text": "X"}}))
    assert out.payload.text == "X" and seen == ["X"]


@pytest.mark.parametrize("method,reason", [("process_output_stream", "Stream part blocked by g"),
                                           ("process_input", "Tripwire triggered by g")])
async def test_p17_default_abort_reasons(method, reason):
    def aborting(self, abort, **_):
        abort()

    r = runner(input=[proc("g", process_input=aborting)], output=[proc("g", process_output_stream=aborting)])
    with pytest.raises(TripWire) as info:
        if method == "process_input":
            await r.process_input(MessageList())
        else:
            await r.process_output_stream(wrap({"type": "text-delta", "payload": {"text": "x"}}))
    assert info.value.reason == reason and info.value.processor_id == "g"


async def test_abort_accepts_the_seed_options_dict_form():
    r = runner(input=[proc("g", process_input=lambda self, abort, **_: abort("no", {"retry": True, "metadata": {"a": 1}}))])
    with pytest.raises(TripWire) as info:
        await r.process_input(MessageList())
    assert info.value.retry is True and info.value.metadata == {"a": 1}


async def test_p26_first_retry_wins():
    calls = []
    a = proc("a", process_api_error=lambda self, **_: calls.append("a") or {"retry": True})
    b = proc("b", process_api_error=lambda self, **_: calls.append("b") or {"retry": True})
    assert await runner(error=[a, b]).process_api_error(MessageList(), error=wrap({}), step_number=0, steps=[])
    assert calls == ["a"]


async def test_p27_a_raising_error_processor_is_ignored():
    def boom(self, **_):
        raise RuntimeError("x")

    assert not await runner(error=[proc("a", process_api_error=boom)]).process_api_error(
        MessageList(), error=wrap({}), step_number=0, steps=[])


async def test_p28_p29_prompt_chain_and_first_response_wins():
    a = proc("a", process_llm_request=lambda self, **_: {"prompt": [], "response": {"chunks": ["R1"]}})
    seen = {}

    def b_fn(self, prompt, **_):
        seen["prompt"] = prompt
        return {"response": {"chunks": ["R2"]}}

    prompt, response = await runner(input=[a, proc("b", process_llm_request=b_fn)]).process_llm_request(
        [{"role": "user", "content": "x"}], model="m", step_number=0, steps=[])
    assert prompt == [] and seen["prompt"] == [] and response == {"chunks": ["R1"]}


async def test_p35_p36_state_per_processor_id_shared_across_methods():
    def inc(self, state, **_):
        state["n"] = state.get("n", 0) + 1

    states = {}
    r = ProcessorRunner(input_processors=[proc("guard", process_input=inc)],
                        output_processors=[proc("guard", process_output_result=lambda self, state, **_:
                                                state.update(seen=state["n"]))],
                        error_processors=[], states=states)
    await r.process_input(MessageList())
    await r.process_output_result(MessageList(), result={})
    assert states["guard"] == {"n": 1, "seen": 1}
    assert ProcessorRunner(input_processors=[], output_processors=[], error_processors=[], states={}).states == {}


def test_p41_processor_index_on_per_run_copies():
    shared = proc("u1", process_input=lambda self, **_: None)
    other = proc("u2", process_input=lambda self, **_: None)
    run_a = resolve_list([shared, other], "input", {}, "agent")
    run_b = resolve_list([other, shared], "input", {}, "agent")
    assert [p.processor_index for p in run_a] == [0, 1] and [p.processor_index for p in run_b] == [0, 1]
    assert shared.processor_index is None  # the shared instance is never mutated (docs/decisions.md#processor-index)


async def test_p44_system_entries_from_output_step_become_system_messages():
    ml = MessageList()
    ml.add(user("q", "q1"))
    p = proc("p", process_output_step=lambda self, messages, **_: [*messages, {"role": "system", "content": "Y"}])
    await runner(output=[p]).process_output_step(ml, step_number=0, steps=[], finish_reason="stop",
                                                 tool_calls=None, text="", usage=None)
    assert [m.content for m in ml.get_system_messages()] == ["Y"] and len(ml) == 1


def test_processor_name_defaults_to_id():
    assert proc("abc").name == "abc"
    p = proc("abc")
    p.name = "Nice"
    assert p.name == "Nice"


def test_processor_lists_may_be_functions_of_the_request_context():
    def build(rc):
        p = proc("cf", process_input=lambda self, **_: None)
        p.words = rc.get("blockedWords", [])
        return [p]

    resolved = resolve_list(build, "input", {"blockedWords": ["x"]}, "agent")
    assert resolved[0].words == ["x"] and resolved[0].processor_index == 0
    with pytest.raises(ConfigurationError, match="implements none"):
        resolve_list(lambda rc: [proc("o", process_output_step=lambda self, **_: None)], "input", {}, "agent")


def test_a_workflow_in_a_processor_list_is_refused_with_why():  # docs/decisions.md#processor-workflows
    from threadline.runtime import Agent
    from threadline.runtime.workflows import create_step, create_workflow

    flow = create_workflow(id="moderate").then(create_step(id="check", execute=lambda **_: {})).commit()
    with pytest.raises(ConfigurationError, match=r"holds the workflow 'moderate'.*not supported"):
        Agent(id="a", input_processors=[flow])

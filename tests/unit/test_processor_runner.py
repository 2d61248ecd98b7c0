import pytest

from threadline._internal.attrdict import wrap
from threadline.errors import ConfigurationError
from threadline.runtime import Agent, MessageList, Processor, ProcessorRunner, TripWire


def _runner(*, input=(), output=(), error=()):
    return ProcessorRunner(input_processors=list(input), output_processors=list(output),
                           error_processors=list(error), states={})


class Scrub(Processor):
    id = "scrub"

    async def process_output_stream(self, *, part, abort, **_):
        try:
            if part.type == "text-delta" and "SYSTEM PROMPT:" in part.payload.text:
                abort("system prompt leak", metadata={"rule": "sp-1"})
        except Exception:  # noqa: BLE001 - "fail open" on purpose: must not swallow the abort (C01)
            return part
        return part


class Tail(Processor):
    id = "tail"

    async def process_output_stream(self, *, part, state, **_):
        state.setdefault("parts", []).append(part.type)
        return part


async def test_abort_cannot_be_swallowed_and_later_processors_never_see_the_chunk():
    runner = _runner(output=[Scrub(), Tail()])
    ok = await runner.process_output_stream(wrap({"type": "text-delta", "payload": {"text": "Sure. "}}))
    assert ok is not None
    with pytest.raises(TripWire) as info:
        await runner.process_output_stream(wrap({"type": "text-delta", "payload": {"text": "SYSTEM PROMPT: x"}}))
    assert info.value.processor_id == "scrub" and info.value.metadata == {"rule": "sp-1"}
    assert runner.states["tail"]["parts"] == ["text-delta"]


async def test_returning_none_drops_the_chunk_for_later_processors():
    class DropB(Processor):
        id = "drop"

        def process_output_stream(self, *, part, **_):  # sync methods work too
            return None if part.payload.text == "B" else part

    tail = Tail()
    runner = _runner(output=[DropB(), tail])
    out = [await runner.process_output_stream(wrap({"type": "text-delta", "payload": {"text": t}})) for t in "ABC"]
    assert [o.payload.text if o else None for o in out] == ["A", None, "C"]
    assert runner.states["tail"]["parts"] == ["text-delta", "text-delta"]
    assert len(runner.stream_parts["drop"]) == 3


async def test_on_violation_called_and_its_errors_swallowed():
    seen = []

    class P(Processor):
        id = "p"

        def on_violation(self, violation):
            seen.append(violation)
            raise RuntimeError("boom")

        async def process_input(self, *, abort, **_):
            abort("nope")

    runner = _runner(input=[P()])
    with pytest.raises(TripWire, match="nope"):
        await runner.process_input(MessageList())
    assert seen[0].processorId == "p" and seen[0].message == "nope"


def test_processor_in_the_wrong_list_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="implements none"):
        Agent(id="a", output_processors=[type("OnlyInput", (Processor,), {
            "id": "x", "process_input": lambda self, **_: None})()])


async def test_process_input_lowercase_example():
    class LowercaseProcessor(Processor):
        id = "lowercase"

        async def process_input(self, *, messages, **_):
            return [{**msg, "content": {**msg.content, "parts": [
                {**p, "text": p.text.lower()} if p.type == "text" else p for p in msg.content.parts]}}
                for msg in messages]

    ml = MessageList()
    ml.add("HeLLo")
    await _runner(input=[LowercaseProcessor()]).process_input(ml)
    assert ml.get.input.db()[0].content.parts[0].text == "hello"


async def test_stream_errors_pass_the_chunk_on_and_an_abort_turned_into_an_error_still_trips():
    """process_output_stream's inlined call: a plain error leaves the chunk unchanged for the next
    processor; an abort re-raised as another error is still the tripwire (and on_violation hears it)."""
    violations = []

    class Flaky(Processor):
        id = "flaky"

        def on_violation(self, violation):
            violations.append(violation.message)

        async def process_output_stream(self, *, part, abort, **_):
            if part.payload.text == "boom":
                raise ValueError("processor bug")
            if part.payload.text == "leak":
                try:
                    abort("leak found")
                except TripWire as tw:
                    raise RuntimeError("wrapped") from tw
            return wrap({**part, "payload": {"text": part.payload.text.upper()}})

    runner = _runner(output=[Flaky(), Tail()])
    out = await runner.process_output_stream(wrap({"type": "text-delta", "payload": {"text": "boom"}}))
    assert out is not None and out.payload.text == "boom"  # unchanged, and Tail saw it
    assert (await runner.process_output_stream(wrap({"type": "text-delta", "payload": {"text": "ok"}}))).payload.text == "OK"
    with pytest.raises(TripWire, match="leak found") as info:
        await runner.process_output_stream(wrap({"type": "text-delta", "payload": {"text": "leak"}}))
    assert info.value.processor_id == "flaky" and violations == ["leak found"]
    assert runner.states["tail"]["parts"] == ["text-delta", "text-delta"]

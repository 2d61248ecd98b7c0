"""``hideSignals`` on ``stream``: Mastra's caller-local policy. The call's own stream leaves out
the signal echoes it names; the option never reaches the run; a thread subscription still sees
every chunk."""

from __future__ import annotations

import pytest

from tests.unit.test_client_transports import _take
from threadline.client import MemoryTransport, ThreadlineClient
from threadline.client.active import hidden_echo
from threadline.events import Stream
from threadline.events.options import check_options, split_caller_options


def _echo(run: str, seq: int, kind: str = "user") -> dict[str, object]:
    chunk_type = "data-user-message" if kind == "user" else "data-signal"
    return {"type": chunk_type, "runId": run, "seq": seq, "data": {"id": f"sig-{seq}", "type": kind}}


def _chunk(run: str, seq: int, kind: str = "text-delta", text: str = "") -> dict[str, object]:
    return {"type": kind, "runId": run, "seq": seq, "payload": {"text": text}}


@pytest.mark.parametrize("hide", [True, ["user"], ["user-message"]])
async def test_the_calls_own_stream_hides_the_echo_and_the_option_is_not_sent(hide):
    memory = MemoryTransport()
    async with ThreadlineClient(transport=memory) as tl:
        everything = await tl.subscribe_to_thread("u-1", "t-1")
        sent = await tl.stream("hi", agent_id="a", resource_id="u-1", thread_id="t-1",
                               options={"hideSignals": hide, "maxSteps": 2})
        accepted = await sent.accepted
        assert accepted.output is not None
        run = accepted.run_id
        assert run is not None
        memory.emit("u-1", "t-1", _chunk(run, 0, "start"), _echo(run, 1), _chunk(run, 2, text="ok"),
                    _echo(run, 3, "reactive"), _chunk(run, 4, "finish"))
        own = [c["type"] for c in await accepted.output.consume_stream(timeout_s=5)]
        seen = [c["type"] async for c in _take(everything.stream, 5)]
        await everything.unsubscribe()
    assert "data-user-message" not in own and "data-user-message" in seen
    assert ("data-signal" in own) is (hide is not True) and "data-signal" in seen
    request = memory.requests[0]
    assert isinstance(request, Stream) and request.options == {"maxSteps": 2}


def test_split_takes_either_spelling_and_refuses_a_bad_value():
    assert split_caller_options({"hide_signals": ["reactive"], "max_steps": 1}) == ({"max_steps": 1}, ["reactive"])
    assert split_caller_options(None) == ({}, False)
    assert check_options({"hideSignals": True}) == {"hideSignals": True}  # known: not refused (decision 126)
    with pytest.raises(ValueError, match="hideSignals"):
        split_caller_options({"hideSignals": "yes"})


def test_a_legacy_type_name_hides_the_canonical_echo():
    assert hidden_echo(_echo("r", 0, "reactive"), ["system-reminder"])
    assert not hidden_echo(_echo("r", 0, "reactive"), ["user"])

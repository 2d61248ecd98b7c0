"""The chunk types (events/chunk_types.py): the kinds named once, every producer's bodies matching
their TypedDict, and the subscribers' reader keeping kinds it does not know."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, get_args, get_origin, get_type_hints

import orjson
import pytest

from threadline.client.active import hidden_echo
from threadline.events import chunk_types, chunks
from threadline.events.chunk_types import (
    KNOWN_KINDS,
    ChunkKind,
    ChunkParseError,
    KnownChunk,
    OtherChunk,
    known,
    parse_chunk,
)
from threadline.events.chunks import nested_chunk
from threadline.runtime.model.llm import ModelOutcome
from threadline.runtime.model.llm_normalise import StreamNormaliser

pytestmark = pytest.mark.unit

_MEMBERS: list[Any] = list(get_args(KnownChunk))


def _literals(td: Any) -> set[str]:
    return set(get_args(get_type_hints(td)["type"]))


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and hasattr(tp, "__required_keys__")


def _conforms(value: Any, tp: Any, where: str = "chunk") -> None:
    """Assert ``value`` has the shape ``tp`` says: TypedDict keys (required present, no others),
    Literal members, nested TypedDicts; JSON values and plain types only loosely."""
    origin = get_origin(tp)
    if _is_typeddict(tp):
        assert isinstance(value, dict), f"{where}: {value!r} is not a dict"
        assert tp.__required_keys__ <= value.keys(), f"{where}: missing {tp.__required_keys__ - value.keys()}"
        assert value.keys() <= tp.__required_keys__ | tp.__optional_keys__, \
            f"{where}: unexpected {value.keys() - tp.__required_keys__ - tp.__optional_keys__}"
        hints = get_type_hints(tp)
        for key, item in value.items():
            _conforms(item, hints[key], f"{where}.{key}")
    elif origin is typing.NotRequired:
        _conforms(value, get_args(tp)[0], where)
    elif origin is Literal:
        assert value in get_args(tp), f"{where}: {value!r} not one of {get_args(tp)}"
    elif origin in (typing.Union, types.UnionType):
        for option in get_args(tp):
            try:
                _conforms(value, option, where)
                return
            except AssertionError:
                continue
        raise AssertionError(f"{where}: {value!r} matches none of {tp}")
    elif tp in (str, int, bool) or tp is type(None):
        assert isinstance(value, tp), f"{where}: {value!r} is not {tp}"


def _body_type(chunk: Mapping[str, Any]) -> Any:
    """The KnownChunk member whose ``type`` Literal holds ``chunk["type"]``."""
    return next(td for td in _MEMBERS if chunk["type"] in _literals(td))


def test_every_kind_name_is_a_typed_kind_and_back() -> None:
    names = {v for k, v in vars(ChunkKind).items() if k.isupper() and k != "DATA_PREFIX"}
    typed = set().union(*(_literals(td) for td in _MEMBERS))
    assert names == typed == KNOWN_KINDS


def _built() -> list[dict[str, Any]]:
    signal = {"id": "sig_1", "type": "user", "contents": "hi", "createdAt": "2026-01-01T00:00:00Z", "attributes": {}}
    out: list[Any] = [
        chunks.start_chunk("agent", "msg_1"),
        chunks.step_start_chunk("msg_1", started_at_ms=5), chunks.step_start_chunk("msg_1", started_at_ms=None),
        chunks.step_finish_chunk("msg_1", reason="stop", is_continued=False, text="x", usage={"totalTokens": 1},
                                 model="openai/gpt-4o"),
        chunks.step_finish_chunk("msg_1", reason="error", is_continued=False, text=None, usage=None, has_text=False),
        chunks.finish_chunk("stop", finish_reason="stop", usage={"totalTokens": 1}, tripwire={"reason": "no"}),
        chunks.finish_chunk("stop", finish_reason="stop", usage={"totalTokens": 1}, last_step=chunks.step_finish_chunk(
            "msg_1", reason="stop", is_continued=False, text="x", usage={"totalTokens": 1}, model="openai/gpt-4o",
            raw_reason="stop", tool_calls=[{"toolCallId": "c1", "toolName": "add", "args": {}}], retry_count=1,
            response={"id": "r", "timestamp": "T", "modelId": "m", "headers": {"a": "b"},
                      "rawUsage": {"total_tokens": 1}})["payload"]),
        chunks.object_chunk({"a": 1}), chunks.object_chunk({"a": 1}, final=True),
        chunks.error_chunk({"kind": "model", "message": "boom"}), chunks.tripwire_chunk({"reason": "blocked"}),
        chunks.attempt_discarded_chunk(0, 1, "retry", {"retryProcessorId": "p", "retryReason": "r"}),
        chunks.tool_result_chunk("c1", "add", {"a": 1}, 2), chunks.tool_error_chunk("c1", "add", {}, "bad"),
        chunks.echo_chunk(signal), chunks.echo_chunk({**signal, "type": "state", "tagName": "lane"}),
        *chunks.abort_chunks(), *chunks.synthetic_run_chunks(signal, agent_id="agent", run_id="run_1"),
    ]
    outcome = ModelOutcome()
    norm = StreamNormaliser(outcome)
    for delta in ({"reasoning_content": "think"}, {"content": "he"}, {"content": "llo"},
                  {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "add", "arguments": '{"a":'}}]},
                  {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}):
        out += norm.feed({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    out += norm.end()
    stamped = chunks.envelope(chunks.start_chunk("child", "msg_2"), run_id="run_2", step=0, attempt=1, seq=0)
    out.append(nested_chunk(stamped, {"thread_id": "t", "tool_call_id": "c9", "tool_name": "helper", "run_id": "run_1"}))
    return out


def test_every_producer_writes_the_shape_its_kind_declares() -> None:
    built = _built()
    assert {c["type"] for c in built} >= KNOWN_KINDS - {ChunkKind.TEXT_END}  # text-end: below, on a clean end
    for chunk in built:
        _conforms(chunk, _body_type(chunk), chunk["type"])


def test_a_text_stream_ends_with_a_typed_text_end() -> None:
    norm = StreamNormaliser(ModelOutcome())
    norm.feed({"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]})
    ends = norm.end()
    assert [c["type"] for c in ends] == [ChunkKind.TEXT_END]
    _conforms(ends[0], _body_type(ends[0]))


def test_a_shape_drift_is_caught() -> None:  # the check above can fail
    chunk = chunks.finish_chunk("stop", finish_reason="stop")
    chunk["payload"]["finishreason"] = "typo"  # type: ignore[typeddict-unknown-key]  # the drift under test
    with pytest.raises(AssertionError, match="unexpected"):
        _conforms(chunk, _body_type(chunk))


def test_parse_chunk_keeps_kinds_it_does_not_know() -> None:
    raw = {"type": "data-lookup", "data": {"customer_id": 7}, "runId": "r", "seq": 3, "from": "USER"}
    chunk = parse_chunk(orjson.dumps(raw))
    assert chunk == raw
    assert known(chunk) is None
    assert parse_chunk(raw) is raw  # an object already decoded is typed, not copied
    _conforms(chunk, OtherChunk)


def test_parse_chunk_types_a_known_kind_for_narrowing() -> None:
    chunk = parse_chunk(orjson.dumps(chunks.finish_chunk("stop", finish_reason="stop")))
    k = known(chunk)
    assert k is not None and k["type"] == ChunkKind.FINISH
    assert k["payload"]["finishReason"] == "stop"


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"text"', b'{"payload": {}}', b'{"type": 3}', b"{not json"])
def test_parse_chunk_refuses_what_is_not_a_chunk(raw: bytes) -> None:
    with pytest.raises(ChunkParseError):
        parse_chunk(raw)


def test_hidden_echo_hides_signal_echoes_only() -> None:
    user = chunks.echo_chunk({"id": "s1", "type": "user", "contents": "hi"})
    state = chunks.echo_chunk({"id": "s2", "type": "state", "contents": "x"})
    text: Any = {"type": ChunkKind.TEXT_DELTA, "payload": {"id": "t0", "text": "hi"}}
    assert not hidden_echo(user, False)
    assert hidden_echo(user, True) and hidden_echo(state, True) and not hidden_echo(text, True)
    assert hidden_echo(state, ["state"]) and not hidden_echo(user, ["state"])


def test_is_data_kind() -> None:
    assert chunk_types.is_data_kind(ChunkKind.DATA_SIGNAL) and chunk_types.is_data_kind("data-x")
    assert not chunk_types.is_data_kind(ChunkKind.TEXT_DELTA)


def test_readers_tolerate_a_known_kind_without_its_payload() -> None:
    from threadline.client.transcript import replay_transcript

    chunks_in: list[Any] = [
        {"type": ChunkKind.START, "runId": "r", "seq": 0, "step": 0, "attempt": 1},
        {"type": ChunkKind.ATTEMPT_DISCARDED, "runId": "r", "seq": 1},
        {"type": ChunkKind.DATA_USER_MESSAGE, "runId": "r", "seq": 2},
        {"type": ChunkKind.FINISH, "runId": "r", "seq": 3}]
    assert replay_transcript(chunks_in) == [{"id": "None", "role": "user", "text": "", "toolCallIds": []}]

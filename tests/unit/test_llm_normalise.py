"""The stream normaliser's rules (docs/decisions.md §20), fed chunk dicts directly."""

from __future__ import annotations

from typing import Any

import pytest

from threadline.runtime.model.llm import ModelOutcome
from threadline.runtime.model.llm_normalise import StreamNormaliser, count, finish_reason, parse_args, usage

pytestmark = pytest.mark.unit


def _calls(*deltas: dict[str, Any], finish: str | None = None) -> tuple[list[dict[str, Any]], ModelOutcome]:
    outcome = ModelOutcome()
    norm = StreamNormaliser(outcome)
    events: list[dict[str, Any]] = []
    for d in deltas:
        events += norm.feed({"choices": [{"index": 0, "delta": d, "finish_reason": None}]})
    if finish:
        events += norm.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    events += norm.end()
    return events, outcome


def _tc(index: int | None, id: str | None = None, name: str | None = None, args: Any = "") -> dict[str, Any]:
    fragment: dict[str, Any] = {"function": {"name": name, "arguments": args}}
    if index is not None:
        fragment["index"] = index
    if id is not None:
        fragment["id"] = id
    return {"tool_calls": [fragment]}


def test_a_new_id_at_a_used_index_starts_a_new_call() -> None:
    _, outcome = _calls(_tc(0, "g1", "f", '{"a"'), _tc(0, None, None, ": 1}"), _tc(0, "g2", "g", "{}"),
                        _tc(0, None, None, ""), finish="tool_calls")
    assert [(c["toolCallId"], c["toolName"], c["args"]) for c in outcome.tool_calls] == [
        ("g1", "f", {"a": 1}), ("g2", "g", {})]


def test_fragments_continue_by_index_or_by_a_repeated_id() -> None:
    _, outcome = _calls(_tc(0, "a", "f", '{"x"'), _tc(1, "b", "g", "{"), _tc(1, "b", None, "}"),
                        _tc(0, None, None, ": 2}"))
    assert [(c["toolCallId"], c["args"]) for c in outcome.tool_calls] == [("a", {"x": 2}), ("b", {})]
    assert outcome.finish_reason == "tool-calls"  # no finish reason: inferred from the calls


def test_a_call_without_id_is_named_by_position_and_keeps_its_name() -> None:
    events, outcome = _calls(_tc(0, None, "f", '{"a": 1}'), _tc(0, "late-id", None, ""), finish="tool_calls")
    assert [c["toolCallId"] for c in outcome.tool_calls] == ["call_0"]
    assert [e["payload"]["toolCallId"] for e in events if e["type"] == "tool-call"] == ["call_0"]


@pytest.mark.parametrize("args", ["", None, "null", "  ", {}])
def test_empty_arguments_are_an_empty_object(args: Any) -> None:
    _, outcome = _calls(_tc(0, "p", "ping", args), finish="tool_calls")
    assert outcome.tool_calls[0]["args"] == {}


def test_absent_arguments_and_argument_objects() -> None:
    _, outcome = _calls({"tool_calls": [{"index": 0, "id": "p", "function": {"name": "ping"}}]},
                        {"tool_calls": [{"index": 1, "id": "q", "function": {"name": "f", "arguments": {"k": 1}}}]})
    assert [c["args"] for c in outcome.tool_calls] == [{}, {"k": 1}]
    assert parse_args('{"id": "C-') == {"__raw": '{"id": "C-'}


def test_finish_reason_inferred_or_mapped() -> None:
    assert finish_reason(None, False) == "stop"
    assert finish_reason(None, True) == "tool-calls"
    assert finish_reason("stop", True) == "tool-calls"
    assert finish_reason("length", True) == "length"
    assert finish_reason("content_filter", False) == "content-filter"
    assert finish_reason("weird", False) == "other"
    _, outcome = _calls({"content": "Hi"})
    assert (outcome.text, outcome.finish_reason, outcome.raw_finish_reason) == ("Hi", "stop", None)


def test_empty_text_is_no_text_and_whitespace_is_kept() -> None:
    events, outcome = _calls({"content": ""}, {"content": None}, _tc(0, "t1", "lookup", "{}"))
    assert not any(e["type"].startswith("text-") for e in events) and outcome.text == ""
    events, outcome = _calls({"content": "\n\n"}, _tc(0, "t1", "lookup", "{}"), finish="tool_calls")
    assert outcome.text == "\n\n" and outcome.finish_reason == "tool-calls"


@pytest.mark.parametrize("chunk", [
    {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}},
    {"choices": [{"index": 0, "delta": {}}], "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
     "usage": {"prompt_tokens": "10", "completion_tokens": 2.0}},
])
def test_usage_from_every_shape(chunk: dict[str, Any]) -> None:
    outcome = ModelOutcome()
    norm = StreamNormaliser(outcome)
    norm.feed({"choices": [{"index": 0, "delta": {"content": "a"}}]})
    norm.feed(chunk)
    norm.end()
    assert outcome.usage == {"inputTokens": 10, "outputTokens": 2, "totalTokens": 12}
    assert all(type(v) is int for v in outcome.usage.values())


def test_usage_details_and_integers() -> None:
    got = usage({"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020,
                 "prompt_tokens_details": {"cached_tokens": 800}, "completion_tokens_details": {"reasoning_tokens": 5}})
    assert got == {"inputTokens": 1000, "outputTokens": 20, "totalTokens": 1020, "cachedInputTokens": 800,
                   "reasoningTokens": 5}
    assert usage({"input_tokens": 3, "output_tokens": 4, "cache_read_input_tokens": 2}) == {
        "inputTokens": 3, "outputTokens": 4, "totalTokens": 7, "cachedInputTokens": 2}
    assert [count(v) for v in (3, 3.0, "3", True, "x", 2.5, None)] == [3, 3, 3, None, None, None, None]


def test_ignored_usage_when_not_taken() -> None:
    outcome = ModelOutcome()
    norm = StreamNormaliser(outcome, take_usage=False)
    norm.feed({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    assert outcome.usage is None and norm.events == 1

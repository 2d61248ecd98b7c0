"""The demo's transcript (``threadline.examples.demo``): the line each chunk kind prints, the model
named once, a text streamed on one line, the stored thread's parts."""

from __future__ import annotations

from typing import Any

import pytest

from threadline.examples import demo


def test_each_chunk_kind_prints_its_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "_seen_models", set())
    chunks: list[dict[str, Any]] = [
        {"type": "start", "runId": "r1"}, {"type": "data-user-message", "data": {"contents": "hi"}},
        {"type": "text-start", "payload": {}}, {"type": "text-delta", "payload": {"text": "Hel"}},
        {"type": "text-delta", "payload": {"text": "lo"}}, {"type": "text-end", "payload": {}},
        {"type": "tool-call", "payload": {"toolCallId": "c", "toolName": "lookup", "args": {"id": 1}}},
        {"type": "tool-result", "payload": {"toolCallId": "c", "toolName": "lookup", "result": {"ok": 1}}},
        {"type": "data-signal", "data": {"tagName": "note", "contents": "x", "attributes": {"a": "b"}}},
        {"type": "tripwire", "payload": {"reason": "r"}},
        {"type": "step-finish", "payload": {"metadata": {}}},
        {"type": "step-finish", "payload": {"metadata": {"modelMetadata": {"modelId": "m1", "modelProvider": "p.chat"}}}},
        {"type": "step-finish", "payload": {"metadata": {"modelMetadata": {"modelId": "m2", "modelProvider": "p.chat"}}}},
        {"type": "finish", "payload": {"finishReason": "stop", "output": {"usage": {"totalTokens": 3}}}},
        {"type": "data-word-count", "data": {"n": 3}},
    ]
    for chunk in chunks:
        demo.show_chunk(chunk)  # type: ignore[arg-type]  # plain dicts, as they arrive
    assert capsys.readouterr().out.splitlines() == [
        "  [run r1 started]", "  user> hi", "  agent> Hello", "  [tool call] lookup({'id': 1})",
        "  [tool result] {'ok': 1}", "  [note signal] 'x' {'a': 'b'}", "  [tripwire] {'reason': 'r'}",
        "  [answered by model p/m1, as the running workers are configured]",  # once, the first that names one
        "  [finish] reason=stop usage={'totalTokens': 3}", "  [data-word-count] {'n': 3}"]


def test_a_stored_part_shows_as_text_a_tool_invocation_or_data() -> None:
    parts = [{"type": "text", "text": "a"},
             {"type": "tool-invocation", "toolInvocation": {"toolName": "t", "args": {"q": 1}, "result": 2}},
             {"type": "data-word-count", "data": 5}, {"type": "step-start"}]
    assert [demo._part_text(p) for p in parts] == ["'a'", "t({'q': 1}) -> 2", "data-word-count 5", None]

"""The gateway's Mastra memory routes without a cluster: a thread delete's answers (decision 156:
Mastra's ``{result}``, another resource's thread 404 and untouched, 409 while a run runs) and
the stored messages as the AI SDK's UI messages (``uiMessages``, decision 157)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from threadline.gateway import mastra_api
from threadline.gateway.app import Gateway, make_app
from threadline.gateway.auth import AuthConfig, parse_api_keys
from threadline.gateway.mastra_ui import ui_message, ui_messages
from threadline.store import queries, thread_rows

BEARER = {"Authorization": "Bearer k-1"}


def _app(monkeypatch: pytest.MonkeyPatch, outcome: str, asked: list[tuple[str, str]]) -> TestClient:
    async def thread_owner(_: Any, thread_id: str) -> str | None:
        return {"t-mine": "user-1", "t-other": "user-2"}.get(thread_id)

    async def delete_thread(_: Any, *, thread_id: str, resource_id: str) -> str:
        asked.append((resource_id, thread_id))
        return outcome

    monkeypatch.setattr(queries, "thread_owner", thread_owner)
    monkeypatch.setattr(thread_rows, "delete_thread", delete_thread)
    auth = AuthConfig(keys=parse_api_keys('{"k-1": ["user-1"]}'))
    return TestClient(make_app(Gateway(None, None, auth), extra_routes=mastra_api.ROUTES))  # type: ignore[arg-type]  # stubs


def test_delete_answers_mastras_result(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str]] = []
    r = _app(monkeypatch, "deleted", asked).delete("/api/memory/threads/t-mine?agentId=a", headers=BEARER)
    assert (r.status_code, r.json()) == (200, {"result": "Thread deleted"})
    assert asked == [("user-1", "t-mine")]


def test_delete_of_another_resources_or_no_thread_is_a_404_that_deletes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str]] = []
    http = _app(monkeypatch, "deleted", asked)
    for thread in ("t-other", "t-none"):
        r = http.delete(f"/api/memory/threads/{thread}", headers=BEARER)
        assert (r.status_code, r.json()["error"]) == (404, "Thread not found")
    assert http.delete("/api/memory/threads/t-mine?resourceId=user-2", headers=BEARER).status_code == 404
    assert http.delete("/api/memory/threads/t-mine").status_code == 401
    assert asked == []


def test_delete_while_a_run_runs_is_a_409(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _app(monkeypatch, "active", []).delete("/api/memory/threads/t-mine", headers=BEARER)
    assert r.status_code == 409
    assert r.json()["code"] == "run_active" and "abort" in r.json()["error"]


def _stored(role: str, parts: list[dict[str, Any]], **content: Any) -> dict[str, Any]:
    return {"id": f"m-{role}", "role": role, "createdAt": "2026-01-01T00:00:00Z", "threadId": "t", "resourceId": "r",
            "type": "v2", "content": {"format": 2, "parts": parts, **content}}


def test_ui_messages_are_the_ai_sdk_5_shapes() -> None:
    call = {"state": "result", "toolCallId": "c1", "toolName": "add", "args": {"a": 1}, "result": 2}
    failed = {"state": "output-error", "toolCallId": "c2", "toolName": "add", "args": {}, "errorText": "boom"}
    answer = ui_message(_stored("assistant", [
        {"type": "reasoning", "reasoning": "", "details": [{"type": "text", "text": "think"}]},
        {"type": "tool-invocation", "toolInvocation": call, "createdAt": 5},
        {"type": "tool-invocation", "toolInvocation": failed},
        {"type": "step-start"}, {"type": "text", "text": "it is 2"}, {"type": "data-progress", "data": {"n": 1}},
        {"type": "file", "mimeType": "image/png", "data": "QUJD"}], metadata={"k": 1}))
    assert answer["role"] == "assistant"
    assert answer["metadata"] == {"k": 1, "createdAt": "2026-01-01T00:00:00Z", "threadId": "t", "resourceId": "r"}
    assert answer["parts"] == [
        {"type": "reasoning", "text": "think", "state": "done"},
        {"type": "tool-add", "toolCallId": "c1", "input": {"a": 1}, "state": "output-available", "output": 2,
         "providerMetadata": {"mastra": {"createdAt": 5}}},
        {"type": "tool-add", "toolCallId": "c2", "input": {}, "state": "output-error", "errorText": "boom"},
        {"type": "step-start"}, {"type": "text", "text": "it is 2"}, {"type": "data-progress", "data": {"n": 1}},
        {"type": "file", "url": "data:image/png;base64,QUJD", "mediaType": "image/png"}]


def test_ui_messages_of_signals_and_legacy_text() -> None:
    user = _stored("signal", [{"type": "text", "text": "hi"}], metadata={"signal": {"type": "user-message"}})
    reactive = _stored("signal", [{"type": "text", "text": "the build is green"}],
                       metadata={"signal": {"type": "reactive", "id": "s1", "createdAt": "2026-01-01T00:00:01Z"}})
    legacy = _stored("user", [], content="plain")
    out = ui_messages([user, reactive, legacy])
    assert [m["role"] for m in out] == ["user", "system", "user"]
    assert out[0]["parts"] == [{"type": "text", "text": "hi"}]
    assert out[1]["parts"] == [{"type": "data-signal", "data": {
        "id": "s1", "type": "reactive", "tagName": "reactive", "contents": "the build is green",
        "createdAt": "2026-01-01T00:00:01Z"}}]
    assert out[2]["parts"] == [{"type": "text", "text": "plain"}]

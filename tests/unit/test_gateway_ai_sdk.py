"""Mastra chunks as the AI SDK's UI message stream, and the chat request's message (decision 136)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from threadline.gateway import ai_sdk
from threadline.gateway.ai_sdk import last_user_message
from threadline.gateway.ai_sdk_stream import UiOptions, error_text, sse, ui_chunks
from threadline.gateway.app import Gateway, make_app
from threadline.gateway.auth import AuthConfig, parse_api_keys
from threadline.gateway.mastra_shapes import ShapeError
from threadline.store import queries

ON = UiOptions(send_reasoning=True)


def _c(kind: str, **payload: object) -> dict:
    return {"type": kind, "runId": "r1", "seq": 3, "payload": payload}


def test_text_and_reasoning_become_ui_parts_and_reasoning_needs_the_switch() -> None:
    assert ui_chunks(_c("text-delta", id="t1", text="Hi"), UiOptions()) == [{"type": "text-delta", "id": "t1", "delta": "Hi"}]
    assert ui_chunks(_c("text-start", id="t1"), UiOptions()) == [{"type": "text-start", "id": "t1"}]
    assert ui_chunks(_c("reasoning-delta", id="r", text="hm"), UiOptions()) == []  # chatRoute's default
    assert ui_chunks(_c("reasoning-delta", id="r", text="hm"), ON) == [{"type": "reasoning-delta", "id": "r", "delta": "hm"}]
    assert ui_chunks(_c("step-start", messageId="m"), ON) == [{"type": "start-step"}]
    assert ui_chunks(_c("start", messageId="m1"), ON) == [{"type": "start", "messageId": "m1"}]
    assert ui_chunks(_c("start", messageId="m1"), UiOptions(message_id="a9")) == [{"type": "start", "messageId": "a9"}]


def test_tool_calls_results_errors_and_data() -> None:
    assert ui_chunks(_c("tool-call-input-streaming-start", toolCallId="c", toolName="add"), ON) == [
        {"type": "tool-input-start", "toolCallId": "c", "toolName": "add", "dynamic": False}]
    assert ui_chunks(_c("tool-call-delta", toolCallId="c", argsTextDelta='{"a"'), ON) == [
        {"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": '{"a"'}]
    assert ui_chunks(_c("tool-call-input-streaming-end", toolCallId="c"), ON) == []
    assert ui_chunks(_c("tool-call", toolCallId="c", toolName="add", args={"a": 1}), ON) == [
        {"type": "tool-input-available", "toolCallId": "c", "toolName": "add", "input": {"a": 1}}]
    assert ui_chunks(_c("tool-result", toolCallId="c", toolName="add", result=3), ON) == [
        {"type": "tool-output-available", "toolCallId": "c", "output": 3}]
    assert ui_chunks(_c("tool-error", toolCallId="c", error={"message": "x"}), ON) == [
        {"type": "tool-output-error", "toolCallId": "c", "errorText": '{"message":"x"}'}]
    data = {"type": "data-progress", "data": {"p": 1}, "transient": True, "runId": "r1", "seq": 4}
    assert ui_chunks(data, ON) == [{"type": "data-progress", "data": {"p": 1}, "transient": True}]
    nested = _c("tool-output", toolCallId="c", output={"type": "tool-output", "payload": {"output": data}})
    assert ui_chunks(nested, ON) == [{"type": "data-progress", "data": {"p": 1}, "transient": True}]
    assert ui_chunks(_c("tool-output", toolCallId="c", output={"type": "text-delta"}), ON) == []


def test_finish_error_abort_tripwire_and_unknown() -> None:
    assert ui_chunks(_c("finish", stepResult={"reason": "stop"}), ON) == [{"type": "finish", "finishReason": "stop"}]
    assert ui_chunks(_c("finish", stepResult={"reason": "tripwire"}), ON) == [{"type": "finish", "finishReason": "other"}]
    rejected = _c("finish", stepResult={"reason": "stop"}, tripwire={"reason": "no"})  # process_output_result's abort
    assert ui_chunks(rejected, ON) == [{"type": "finish", "finishReason": "other"}]
    assert ui_chunks(_c("finish"), ON) == [{"type": "finish"}]
    assert ui_chunks(_c("error", error="boom"), ON) == [{"type": "error", "errorText": "boom"}]
    assert ui_chunks(_c("abort"), ON) == [{"type": "abort"}]
    assert ui_chunks(_c("tripwire", reason="no", retry=False, processorId="p"), ON) == [
        {"type": "data-tripwire", "data": {"reason": "no", "retry": False, "processorId": "p"}}]
    assert ui_chunks(_c("attempt-discarded"), ON) == [] and ui_chunks({"payload": {}}, ON) == []
    assert error_text({}) == "{}" and error_text(None) == "None" and error_text({"a": 1}) == '{"a":1}'
    assert sse({"type": "finish"}) == b'data: {"type":"finish"}\n\n'


def test_the_last_user_message_is_sent() -> None:
    history = [{"id": "1", "role": "user", "parts": [{"type": "text", "text": "old"}]},
               {"id": "2", "role": "assistant", "parts": [{"type": "text", "text": "answer"}]},
               {"id": "3", "role": "user", "parts": [{"type": "text", "text": "new "}, {"type": "text", "text": "one"},
                                                     {"type": "step-start"}]}]
    assert last_user_message(history) == "new one"
    file = {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AA=="}
    assert last_user_message([{"role": "user", "parts": [{"type": "text", "text": "see"}, file]}]) == [
        {"type": "text", "text": "see"}, file]
    assert last_user_message([{"role": "user", "content": "plain"}]) == "plain"
    for bad in ([], "hi", [{"role": "assistant", "parts": []}]):
        with pytest.raises(ShapeError):
            last_user_message(bad)


def test_the_chat_route_refuses_what_it_cannot_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    async def read_agent(_: object, agent_id: str) -> dict | None:
        return {"id": agent_id} if agent_id == "helper" else None

    monkeypatch.setattr(queries, "read_agent", read_agent)
    gateway = Gateway(None, None, AuthConfig(keys=parse_api_keys('{"k-all": ["*"], "k-2": ["u1", "u2"]}')))  # type: ignore[arg-type]  # refused before any I/O
    http = TestClient(make_app(gateway, extra_routes=ai_sdk.ROUTES))
    body = {"id": "chat-1", "messages": [{"id": "1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
            "trigger": "submit-message"}
    for key in ("k-all", "k-2"):  # no memory.resource, and the caller has more than one
        r = http.post("/chat/helper", json=body, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 400 and "memory.resource" in r.json()["error"], r.text
        assert http.get("/chat/helper/chat-1/stream", headers={"Authorization": f"Bearer {key}"}).status_code == 400
    r = http.post("/chat/helper", json={**body, "trigger": "regenerate-message"}, headers={"Authorization": "Bearer k-2"})
    assert r.status_code == 400 and "regenerate" in r.json()["error"]
    assert http.post("/chat/nobody", json=body, headers={"Authorization": "Bearer k-2"}).status_code == 404
    assert http.post("/chat/helper", json=body).status_code == 401
    forbidden = {**body, "memory": {"resource": "u3", "thread": "t"}}
    assert http.post("/chat/helper", json=forbidden, headers={"Authorization": "Bearer k-2"}).status_code == 403

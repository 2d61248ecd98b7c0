"""Mastra's server API on the gateway without a cluster (decision 132): the pure translations,
CORS by configured origins, a 503 with a JSON body when Kafka cannot be reached, and the
keep-alive comments and ``[DONE]`` of a stream answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from threadline.client.client import BrokerUnavailableError
from threadline.gateway import mastra_api
from threadline.gateway import mastra_shapes as shapes
from threadline.gateway.app import Gateway, make_app
from threadline.gateway.auth import AuthConfig, parse_api_keys
from threadline.store import queries

ORIGIN = "https://app.example"


class _Unreachable:
    """A client whose broker cannot be reached: every send raises as the real one does."""

    transport = None  # no agents module: the details leave out tool schemas and the model

    async def send_message(self, *_: Any, **__: Any) -> Any:
        raise BrokerUnavailableError("not acknowledged in time")


def _app(monkeypatch: pytest.MonkeyPatch, *, cors: tuple[str, ...] = (), auth: AuthConfig | None = None) -> TestClient:
    async def read_agent(_: Any, agent_id: str) -> dict[str, Any] | None:
        return {"id": agent_id, "name": agent_id, "memory": {}} if agent_id == "helper" else None

    async def thread_owner(_: Any, thread_id: str) -> str | None:
        return {"t-mine": "user-1", "t-other": "user-2"}.get(thread_id)

    monkeypatch.setattr(queries, "read_agent", read_agent)
    monkeypatch.setattr(queries, "thread_owner", thread_owner)
    gateway = Gateway(_Unreachable(), None, auth or AuthConfig(open=True))  # type: ignore[arg-type]  # stubs
    return TestClient(make_app(gateway, extra_routes=mastra_api.ROUTES, cors_origins=cors))


def _send(http: TestClient, thread: str = "t-mine", **headers: str) -> Any:
    return http.post("/api/agents/helper/send-message", json={"message": "hi", "resourceId": "user-1",
                                                              "threadId": thread}, headers=headers)


def test_kafka_away_is_a_503_with_a_json_body(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _send(_app(monkeypatch))
    assert r.status_code == 503
    assert r.json() == {"error": "Kafka cannot be reached", "code": "broker_unavailable"}


def test_tenancy_is_the_v1_apis(monkeypatch: pytest.MonkeyPatch) -> None:
    auth = AuthConfig(keys=parse_api_keys('{"k-1": ["user-1"]}'))
    http = _app(monkeypatch, auth=auth)
    assert _send(http).status_code == 401
    bearer = {"Authorization": "Bearer k-1"}
    assert _send(http, "t-other", **bearer).status_code == 404  # another resource's thread: as missing
    r = http.post("/api/agents/helper/send-message", headers=bearer,
                  json={"message": "hi", "resourceId": "user-2", "threadId": "t-x"})
    assert r.status_code == 403 and r.json()["code"] == "forbidden"
    assert http.get("/api/agents/nobody", headers=bearer).status_code == 404
    assert http.post("/api/tools/add/execute", headers=bearer, json={"data": {}}).status_code == 501  # no agents module
    # threads/abort without resourceId: the thread's own resource, if the caller may see it
    hidden = http.post("/api/agents/helper/threads/abort", headers=bearer, json={"threadId": "t-other"})
    assert hidden.status_code == 404 and hidden.json()["error"] == "Thread not found"
    assert http.post("/api/agents/helper/threads/abort", headers=bearer, json={}).status_code == 400


def test_cors_answers_the_preflight_of_a_configured_origin_only(monkeypatch: pytest.MonkeyPatch) -> None:
    http = _app(monkeypatch, cors=(ORIGIN,))
    asked = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type"}
    r = http.options("/api/agents/helper/stream", headers=asked)
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in r.headers["access-control-allow-headers"].lower()
    keyed = http.options("/v1/resources/user-1/threads/t-mine/messages",
                         headers={**asked, "Access-Control-Request-Headers": "authorization, idempotency-key"})
    assert keyed.status_code == 200 and "idempotency-key" in keyed.headers["access-control-allow-headers"].lower()
    refused = http.options("/api/agents/helper/stream", headers={**asked, "Origin": "https://evil.example"})
    assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
    answer = _send(http, Origin=ORIGIN)
    assert answer.headers["access-control-allow-origin"] == ORIGIN  # on the answer too
    assert "idempotency-replayed" in answer.headers["access-control-expose-headers"].lower()  # decision 213
    closed = _app(monkeypatch)  # no origins configured: no CORS headers at all
    assert "access-control-allow-origin" not in closed.options("/api/agents/helper/stream", headers=asked).headers


class _Slow:
    """A chunk source that is quiet for a while, then writes one chunk and ends."""

    def __init__(self) -> None:
        self.closed = False

    @property
    def stream(self) -> AsyncIterator[dict[str, Any]]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[dict[str, Any]]:
        await asyncio.sleep(0.25)
        yield {"type": "finish", "runId": "r1", "payload": {}}

    async def unsubscribe(self) -> None:
        self.closed = True


async def test_a_quiet_stream_gets_keep_alive_comments_then_done(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mastra_api, "KEEP_ALIVE_S", 0.05)
    source = _Slow()
    out = [b async for b in mastra_api._chunks(source, done=True)]
    assert out[0] == shapes.KEEP_ALIVE and out.count(shapes.KEEP_ALIVE) >= 2
    assert out[-2] == b'data: {"type":"finish","runId":"r1","payload":{}}\n\n' and out[-1] == shapes.DONE
    assert source.closed


def test_memory_target_and_options() -> None:
    t = shapes.memory_target({"memory": {"resource": "u", "thread": {"id": "t", "title": "T"}}, "maxSteps": 2})
    assert (t.resource_id, t.thread_id, t.thread) == ("u", "t", {"title": "T"})
    assert shapes.memory_target({"resourceId": "u", "threadId": "t"}).thread is None
    with pytest.raises(shapes.ShapeError, match="memory"):
        shapes.memory_target({"messages": "hi"})
    assert shapes.run_options({"messages": "x", "memory": {}, "maxSteps": 2, "output": None}) == {"maxSteps": 2}
    with pytest.raises(shapes.ShapeError, match="clientTools"):
        shapes.run_options({"clientTools": {"x": {}}})
    assert shapes.if_idle({"behavior": "wake", "streamOptions": {"maxSteps": 1}}) == {
        "behavior": "wake", "stream_options": {"maxSteps": 1}}
    assert shapes.message_input({"contents": "hi", "providerOptions": {"a": {}}}) == {
        "contents": "hi", "provider_options": {"a": {}}}
    assert shapes.message_input([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "b"


def test_pages() -> None:
    p = shapes.page_of({"page": "2", "perPage": "3"}, per_page=40, descending=False, fields=("createdAt",))
    assert (p.offset, p.limit) == (6, 3)
    assert p.answer(10, [1, 2, 3]) == {"total": 10, "page": 2, "perPage": 3, "hasMore": True}
    assert p.answer(9, [1, 2, 3])["hasMore"] is False
    every = shapes.page_of({"perPage": "false", "orderBy[direction]": "DESC"}, per_page=40, descending=False,
                           fields=("createdAt",))
    assert every.per_page is None and every.descending and every.answer(1, [1])["perPage"] is False
    by_json = shapes.page_of({"orderBy": '{"field": "createdAt", "direction": "DESC"}'}, per_page=40,
                             descending=False, fields=("createdAt",))
    assert by_json.descending
    assert shapes.json_object('{"topic": "x"}', "metadata") == {"topic": "x"}
    for bad in ({"page": "-1"}, {"perPage": "x"}, {"orderBy[field]": "title"}, {"perPage": "0"}, {"orderBy": "[1]"}):
        with pytest.raises(shapes.ShapeError):
            shapes.page_of(bad, per_page=40, descending=False, fields=("createdAt",))


def test_agent_details_apply_the_editor_overrides_and_leave_out_what_is_unknown() -> None:
    row = {"id": "a", "name": "A", "description": None, "metadata": {"team": "x"}}
    editable = {"editor": {"instructions": True}, "overrides": {"tools": {"add": {"description": "adds"}}},
                "code": {"instructions": "Be brief.", "tools": {"add": "add two numbers", "sub": "subtract"}}}
    facts = shapes.CodeFacts({"add": {"type": "object", "properties": {"a": {"type": "integer"}}}}, "openai/gpt-x")
    out = shapes.agent_shape(row, editable, facts)
    assert out["instructions"] == "Be brief." and (out["provider"], out["modelId"]) == ("openai", "gpt-x")
    assert out["tools"]["add"]["description"] == "adds" and '"a"' in out["tools"]["add"]["inputSchema"]
    assert "inputSchema" not in out["tools"]["sub"]  # unknown: absent, never a guessed schema
    bare = shapes.agent_shape(row, None, None)
    assert "instructions" not in bare and "modelId" not in bare and bare["tools"] == {}


def test_answers() -> None:
    assert shapes.accepted_shape({"action": "wake", "run_id": "r", "signal": {"id": "s"}}) == {
        "accepted": True, "runId": "r", "action": "wake", "signal": {"id": "s"}}
    assert shapes.accepted_shape({"action": "persist", "run_id": None})["runId"] is None
    g = shapes.generate_shape({"run_id": "r", "text": "t", "finish_reason": "stop", "usage": {"inputTokens": 1},
                               "steps": [{"toolCalls": [{"toolName": "add"}], "toolResults": []}]})
    assert (g["finishReason"], g["runId"], g["toolCalls"]) == ("stop", "r", [{"toolName": "add"}])
    assert shapes.sse_data({"a": 1}) == b'data: {"a":1}\n\n'
    assert shapes.memory_config({"lastMessages": 10})["config"]["lastMessages"] == 10
    assert shapes.memory_config({"lastMessages": False})["config"]["lastMessages"] is False

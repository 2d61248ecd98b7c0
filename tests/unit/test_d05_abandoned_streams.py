"""D05 (cases-3): a stream whose browser leaves before its response body starts still closes its
subscription — the fan-out stream it holds counts against ``THREADLINE_GATEWAY_MAX_STREAMS`` —
on ``/v1/…/events`` (sse-starlette) and on Mastra's ``threads/subscribe`` (decision 190); and the
Mastra ``/api`` and AI SDK routes answer a gateway at capacity as ``/v1`` does: 503
``at_capacity`` with ``Retry-After`` (decision 191)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.testclient import TestClient

from threadline.client.kafka_transport import StreamsFullError
from threadline.gateway import ai_sdk, mastra_api
from threadline.gateway.app import Gateway, make_app
from threadline.gateway.auth import AuthConfig
from threadline.store import queries

EVENTS = "/v1/resources/user-1/threads/t-mine/events"
SUBSCRIBE = "/api/agents/helper/threads/subscribe"


class _Sub:
    """A subscription that never yields a chunk; counts the open ones as the fan-out reader does."""

    topic = "chunks.user-1.t-mine"
    start_offset = 0
    last_offset = None

    def __init__(self, client: _Client) -> None:
        self._client = client
        self._open = True

    @property
    def stream(self) -> Any:
        return self._never()

    async def _never(self) -> Any:
        await asyncio.Event().wait()
        yield {}  # pragma: no cover - never reached

    async def unsubscribe(self) -> None:
        if self._open:
            self._open = False
            self._client.open -= 1


class _Client:
    transport = None

    def __init__(self, *, full: bool = False) -> None:
        self.open = 0
        self.full = full

    async def subscribe_to_thread(self, *_: Any, **__: Any) -> _Sub:
        if self.full:
            raise StreamsFullError("this process serves its maximum of 2 streams", 5)
        self.open += 1
        return _Sub(self)

    async def stream(self, *_: Any, **__: Any) -> Any:
        raise StreamsFullError("this process serves its maximum of 2 streams", 5)


def _app(monkeypatch: pytest.MonkeyPatch, client: _Client) -> Any:
    async def read_agent(_: Any, agent_id: str) -> dict[str, Any] | None:
        return {"id": agent_id, "name": agent_id, "memory": {}} if agent_id == "helper" else None

    async def thread_owner(_: Any, thread_id: str) -> str | None:
        return {"t-mine": "user-1"}.get(thread_id)

    monkeypatch.setattr(queries, "read_agent", read_agent)
    monkeypatch.setattr(queries, "thread_owner", thread_owner)
    gateway = Gateway(client, None, AuthConfig(open=True))  # type: ignore[arg-type]  # stubs
    return make_app(gateway, extra_routes=[*mastra_api.ROUTES, *ai_sdk.ROUTES])


async def _gone_before_the_body(app: Any, method: str, path: str, body: bytes = b"") -> list[str]:
    """Serve one request whose client is gone before the response starts: ``receive`` gives the
    body, then ``http.disconnect``; sending the response's start takes a moment (a full socket).
    The message types sent."""
    sent: list[str] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])
        if message["type"] == "http.response.start":
            await asyncio.sleep(0.05)

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 8000), "state": {}}
    await asyncio.wait_for(app(scope, receive, send), 5)
    return sent


async def test_d05_a_v1_stream_left_before_its_body_closes_its_subscription(monkeypatch: pytest.MonkeyPatch) -> None:
    client = _Client()
    app = _app(monkeypatch, client)
    for _ in range(3):
        sent = await _gone_before_the_body(app, "GET", EVENTS)
        assert sent[0] == "http.response.start"
    assert client.open == 0


async def test_d05_a_head_request_on_a_v1_stream_closes_its_subscription(monkeypatch: pytest.MonkeyPatch) -> None:
    client = _Client()
    with TestClient(_app(monkeypatch, client)) as http:
        for _ in range(3):
            r = http.head(EVENTS)
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert client.open == 0


async def test_d05_a_mastra_subscription_left_before_its_body_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    client = _Client()
    app = _app(monkeypatch, client)
    for _ in range(3):
        await _gone_before_the_body(app, "POST", SUBSCRIBE, b'{"threadId": "t-mine", "resourceId": "user-1"}')
    assert client.open == 0


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", SUBSCRIBE, {"threadId": "t-mine", "resourceId": "user-1"}),
    ("POST", "/api/agents/helper/stream", {"messages": "hi", "memory": {"thread": "t-mine", "resource": "user-1"}}),
    ("POST", "/chat/helper", {"id": "t-mine", "resourceId": "user-1",
                              "messages": [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}]}),
])
def test_d05_mastra_and_ai_sdk_routes_at_capacity_answer_503_with_retry_after(
        monkeypatch: pytest.MonkeyPatch, method: str, path: str, body: dict[str, Any]) -> None:
    with TestClient(_app(monkeypatch, _Client(full=True))) as http:
        r = http.request(method, path, json=body)
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "5"
        assert r.json()["code"] == "at_capacity"
        v1 = http.get(EVENTS)
        assert (v1.status_code, v1.headers["retry-after"], v1.json()["error"]["code"]) == (503, "5", "at_capacity")

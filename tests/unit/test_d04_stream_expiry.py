"""D04 (cases-3), the pure parts (decision 216): a JWT caller knows when its credential expires
(an API key never does), and a stream bounded by that instant ends with ``token_expired`` even
while no chunk comes, closing its source."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import jwt
import orjson
import pytest

from threadline.gateway.auth import AuthConfig, authenticate, parse_api_keys
from threadline.gateway.streaming import EXPIRED, until_expiry

pytestmark = pytest.mark.unit
SECRET = "s" * 32


def test_a_jwt_caller_carries_its_expiry_and_a_key_caller_none():
    exp = int(time.time()) + 60
    config = AuthConfig(keys=parse_api_keys('{"k-1": ["r"]}'), jwt_key=SECRET)
    token = jwt.encode({"resources": ["r"], "exp": exp}, SECRET, algorithm="HS256")
    assert authenticate(config, token).expires_at == exp
    assert authenticate(config, "k-1").expires_at is None


async def _slow(closed: list[bool]) -> AsyncIterator[dict[str, str | int]]:
    try:
        yield {"event": "subscribed", "data": "{}"}
        for i in range(100):
            await asyncio.sleep(0.05)
            yield {"data": str(i)}
    finally:
        closed.append(True)


async def test_a_stream_ends_at_its_credentials_expiry_with_why():
    closed: list[bool] = []
    expires_at = time.time() + 0.3
    got = [e async for e in until_expiry(_slow(closed), expires_at)]
    assert time.time() - expires_at < 0.2
    assert got[0]["event"] == "subscribed" and 3 <= len(got) <= 8
    assert got[-1] == {"event": "error", "data": orjson.dumps(EXPIRED).decode()}
    assert EXPIRED["code"] == "token_expired" and closed == [True]


async def test_an_expired_credential_gets_nothing_and_none_no_bound():
    source = _slow([])
    assert [e["event"] async for e in until_expiry(source, time.time() - 1)] == ["error"]
    assert source.ag_frame is None  # closed, never started
    assert len([e async for e in until_expiry(_slow([]), None)]) == 101


class _Ticking:
    """A thread subscription that writes a chunk every 0.05 s and never ends by itself."""

    transport = None

    def __init__(self) -> None:
        self.closed = False

    async def subscribe_to_thread(self, *_: object, **__: object) -> _Ticking:
        return self

    @property
    def stream(self) -> AsyncIterator[dict[str, object]]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[dict[str, object]]:
        i = 0
        while True:
            await asyncio.sleep(0.05)
            i += 1
            yield {"type": "text-delta", "runId": "r1", "seq": i, "payload": {"text": "x"}}

    async def unsubscribe(self) -> None:
        self.closed = True


def test_the_mastra_apis_subscription_ends_at_its_tokens_expiry_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from starlette.testclient import TestClient

    from threadline.gateway import mastra_api
    from threadline.gateway import mastra_shapes as shapes
    from threadline.gateway.app import Gateway, make_app
    from threadline.store import queries

    async def read_agent(_: object, agent_id: str) -> dict[str, object]:
        return {"id": agent_id, "name": agent_id, "memory": {}}

    async def thread_owner(_: object, thread_id: str) -> str:
        return "r"

    monkeypatch.setattr(queries, "read_agent", read_agent)
    monkeypatch.setattr(queries, "thread_owner", thread_owner)
    source = _Ticking()
    gateway = Gateway(source, None, AuthConfig(jwt_key=SECRET))  # type: ignore[arg-type]  # a stand-in client
    http = TestClient(make_app(gateway, extra_routes=mastra_api.ROUTES))
    exp = int(time.time()) + 1
    token = jwt.encode({"resources": ["r"], "exp": exp}, SECRET, algorithm="HS256")
    with http.stream("POST", "/api/agents/helper/threads/subscribe", json={"resourceId": "r", "threadId": "t"},
                     headers={"Authorization": f"Bearer {token}"}) as answer:
        body = answer.read()
    assert time.time() <= exp + 1
    assert body.count(b'"text-delta"') >= 1 and body.endswith(shapes.sse_data(shapes.EXPIRED_CHUNK))
    assert source.closed

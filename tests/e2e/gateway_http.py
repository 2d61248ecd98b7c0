"""Test side of the HTTP gateway: its address and credentials, and a reader of its Server-Sent
Events (the client end; the gateway frames them with sse-starlette)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt
import orjson

from threadline.testing.event_source import field_of

TENANT_A = "tenant-a"
TENANT_B = "tenant-b"


@dataclass
class GatewayInfo:
    """A running gateway: ``url``, an API key per tenant, the JWT secret."""

    url: str
    port: int
    key_a: str
    key_b: str
    jwt_secret: str
    key_editor: str = ""
    """Tenant A's resources and the ``editor`` scope (agents' editor overrides)."""
    keys: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def make(cls, port: int) -> GatewayInfo:
        key_a, key_b = f"tlk-a-{secrets.token_hex(16)}", f"tlk-b-{secrets.token_hex(16)}"
        key_e = f"tlk-e-{secrets.token_hex(16)}"
        return cls(url=f"http://127.0.0.1:{port}", port=port, key_a=key_a, key_b=key_b,
                   jwt_secret=secrets.token_hex(32), key_editor=key_e,
                   keys={key_a: [TENANT_A], key_b: [TENANT_B], key_e: {"resources": [TENANT_A], "scopes": ["editor"]}})

    def env(self) -> dict[str, str]:
        return {"THREADLINE_GATEWAY_PORT": str(self.port), "THREADLINE_GATEWAY_HOST": "127.0.0.1",
                "THREADLINE_GATEWAY_API_KEYS": orjson.dumps(self.keys).decode(),
                "THREADLINE_GATEWAY_JWT_SECRET": self.jwt_secret}

    def token(self, resources: list[str], *, ttl_s: float = 600) -> str:
        return jwt.encode({"resources": resources, "exp": int(time.time() + ttl_s)}, self.jwt_secret, algorithm="HS256")

    def client(self, key: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=60)

    def secrets(self) -> list[str]:
        return [self.key_a, self.key_b, self.key_editor, self.jwt_secret]


def thread_path(resource: str, thread: str) -> str:
    return f"/v1/resources/{resource}/threads/{thread}"


@dataclass
class Event:
    event: str
    data: Any
    id: str | None


async def sse(http: httpx.AsyncClient, path: str, *, params: dict[str, str] | None = None,
              headers: dict[str, str] | None = None) -> AsyncIterator[Event]:
    """The events of one SSE response (raises for a status other than 200)."""
    async with http.stream("GET", path, params=params, headers=headers) as resp:
        if resp.status_code != 200:
            await resp.aread()
            raise httpx.HTTPStatusError(f"{resp.status_code}: {resp.text}", request=resp.request, response=resp)
        name, data, eid = "message", [], None
        async for line in resp.aiter_lines():
            if line == "":
                if data:
                    yield Event(name, orjson.loads("\n".join(data)), eid)
                name, data, eid = "message", [], None
            elif line.startswith(":"):
                continue
            else:
                key, value = field_of(line)
                if key == "event":
                    name = value
                elif key == "data":
                    data.append(value)
                elif key == "id":
                    eid = value


async def collect(http: httpx.AsyncClient, path: str, *, until: Any, timeout_s: float = 60,
                  params: dict[str, str] | None = None, headers: dict[str, str] | None = None,
                  on_event: Any = None) -> list[Event]:
    """Chunk events of ``path`` until ``until(events)`` is true (``on_event(ev)`` awaited per event)."""
    out: list[Event] = []

    async def read() -> None:
        async for ev in sse(http, path, params=params, headers=headers):
            if ev.event == "message":
                out.append(ev)
            if on_event is not None:
                await on_event(ev)
            if until(out):
                return

    try:
        await asyncio.wait_for(read(), timeout_s)
    except TimeoutError:
        raise AssertionError(f"stream did not end as expected; saw {[e.data.get('type') for e in out]}") from None
    return out


def finished(runs: int = 1) -> Any:
    """``until`` for :func:`collect`: ``runs`` finish chunks seen."""
    return lambda evs: sum(1 for e in evs if e.data.get("type") == "finish") >= runs

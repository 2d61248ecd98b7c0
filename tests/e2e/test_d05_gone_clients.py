"""D05 (cases-3) against a running gateway: clients that vanish without a clean close — a ``HEAD``
on the stream, a reset right after the request headers (before the response starts), a reset
right after ``subscribed``, a half-close after ``subscribed`` — give their stream back. A gateway
limited to 3 streams (``THREADLINE_GATEWAY_MAX_STREAMS``) abandoned 4 times in each way is back to
0 open streams on ``/metrics`` (``threadline_gateway_open_streams``, equal to the real count),
then serves 3 streams at once (decision 190)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
import uuid

import httpx

from tests.e2e.gateway_http import TENANT_A, GatewayInfo, sse, thread_path
from threadline.testing.containers import free_port

LIMIT = 3
ROUNDS = 4  # more than LIMIT: one stream kept per abandon fills the gateway
BACK_S = 50  # the case's bound: 30 s send_timeout + 15 s keep-alive + 5 s


def _request(info: GatewayInfo, path: str) -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{info.port}\r\nAuthorization: Bearer {info.key_a}\r\n"
            "Accept: text/event-stream\r\n\r\n").encode()


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), not FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _until_subscribed(sock: socket.socket) -> None:
    got = b""
    deadline = time.monotonic() + 30
    while b"event: subscribed" not in got:
        assert time.monotonic() < deadline, got
        part = sock.recv(4096)
        assert part, got
        got += part


def _abandon(info: GatewayInfo, path: str, how: str) -> socket.socket | None:
    """One client gone ``how``; the half-closed socket is returned (kept open), else ``None``."""
    sock = socket.create_connection(("127.0.0.1", info.port), timeout=30)
    sock.sendall(_request(info, path))
    if how == "rst_before_response":
        _reset(sock)
        return None
    _until_subscribed(sock)
    if how == "rst_after_subscribed":
        _reset(sock)
        return None
    sock.shutdown(socket.SHUT_WR)  # half_close: FIN sent, nothing more read
    return sock


async def _open_streams(metrics: httpx.AsyncClient) -> int:
    text = (await metrics.get("/metrics")).text
    return int(float(next(line.split()[1] for line in text.splitlines()
                          if line.startswith("threadline_gateway_open_streams "))))


async def _back_to(metrics: httpx.AsyncClient, count: int) -> None:
    async with asyncio.timeout(BACK_S):
        while (seen := await _open_streams(metrics)) != count:
            await asyncio.sleep(0.2)
    assert seen == count


async def _serve_all(http: httpx.AsyncClient, metrics: httpx.AsyncClient, path: str) -> bool:
    """Open LIMIT streams at once; ``False`` when the gateway refused one at capacity (503)."""
    streams = [sse(http, f"{path}/events") for _ in range(LIMIT)]
    try:
        async with asyncio.timeout(30):
            for s in streams:
                assert (await anext(s)).event == "subscribed"
        assert await _open_streams(metrics) == LIMIT
        return True
    except httpx.HTTPStatusError as exc:
        assert exc.response.status_code == 503, exc
        return False
    finally:
        for s in streams:
            await s.aclose()
        await _back_to(metrics, 0)


async def _all_slots_serve(http: httpx.AsyncClient, metrics: httpx.AsyncClient, path: str) -> None:
    """Within the case's bound the gateway serves LIMIT streams at once. A request of an abandoned
    client that the gateway handles only now (its bytes arrived before the reset) holds a slot for
    the moment it takes to find its client gone: a refusal then is retried; a slot that is never
    given back fails the bound."""
    async with asyncio.timeout(BACK_S):
        while not await _serve_all(http, metrics, path):
            await asyncio.sleep(0.5)


async def test_d05_clients_gone_without_a_clean_close_give_their_streams_back(services, model):
    info, metrics_port = GatewayInfo.make(free_port()), free_port()
    await asyncio.to_thread(services.start, "gateway", "gateway-d05", **info.env(),
                            THREADLINE_GATEWAY_MAX_STREAMS=str(LIMIT), THREADLINE_METRICS_PORT=str(metrics_port))
    held: list[socket.socket] = []
    try:
        model.queue({"text": "made"}, model="threadline-gateway")
        path = thread_path(TENANT_A, f"gwd05-{uuid.uuid4().hex[:10]}")
        async with info.client(info.key_a) as http, \
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{metrics_port}", timeout=10) as metrics:
            r = await http.post(f"{path}/generate", json={"message": "hi", "agent_id": "gateway"})
            assert r.status_code == 200, r.text
            await _back_to(metrics, 0)
            for _ in range(ROUNDS):
                head = await http.head(f"{path}/events")
                assert head.status_code == 200, head.text
            await _back_to(metrics, 0)
            await _all_slots_serve(http, metrics, path)
            for how in ("rst_before_response", "rst_after_subscribed", "half_close"):
                for _ in range(ROUNDS):
                    sock = await asyncio.to_thread(_abandon, info, f"{path}/events", how)
                    if sock is not None:
                        held.append(sock)
                await _back_to(metrics, 0)
                await _all_slots_serve(http, metrics, path)
    finally:
        for sock in held:
            with contextlib.suppress(OSError):
                sock.close()
        services.kill("gateway-d05")

"""A gateway's Kafka consumers do not grow with its streams (issue 41, item 2): 50 SSE streams on
50 threads are read by the gateway's one fan-out reader — its broker connections are the same
with 5 streams open and with 50 — and every stream gets its run's chunks in order, once. A
gateway at its ``THREADLINE_GATEWAY_MAX_STREAMS`` answers 503 with ``Retry-After``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import httpx

from bench.fanout_streams import broker_connections
from tests.e2e.gateway_http import TENANT_A, Event, GatewayInfo, sse, thread_path
from threadline.testing.containers import free_port

STREAMS = 50
WAIT_S = 120  # liveness bound only: 50 runs on a loaded 2-core machine


async def _subscribed(events: AsyncIterator[Event]) -> None:
    async with asyncio.timeout(WAIT_S):
        first = await anext(events)
    assert first.event == "subscribed", first


async def _until_finish(events: AsyncIterator[Event]) -> list[dict]:
    chunks = []
    async with asyncio.timeout(WAIT_S):
        async for ev in events:
            if ev.event == "message":
                chunks.append(ev.data)
                if ev.data["type"] == "finish":
                    return chunks
    raise AssertionError(f"the stream ended without a finish: {[c['type'] for c in chunks]}")


async def test_fifty_streams_on_fifty_threads_hold_no_more_broker_connections_than_five(
        gateway, services, cluster, model):
    words = ["one", " two", " three"]
    model.queue([{"chunks": words} for _ in range(STREAMS)], model="threadline-gateway")
    paths = [thread_path(TENANT_A, f"gwf-{uuid.uuid4().hex[:10]}") for _ in range(STREAMS)]
    limits = httpx.Limits(max_connections=STREAMS + 10)
    async with httpx.AsyncClient(base_url=gateway.url, headers={"Authorization": f"Bearer {gateway.key_a}"},
                                 timeout=WAIT_S, limits=limits) as http:
        sent = await asyncio.gather(*(http.post(f"{p}/messages", json={"message": "hi", "agent_id": "gateway"})
                                      for p in paths))
        assert all(r.status_code == 202 for r in sent), [r.text for r in sent if r.status_code != 202]
        runs = [r.json()["run_id"] for r in sent]
        streams = [sse(http, f"{p}/events", params={"from": "beginning"}) for p in paths]
        try:
            await asyncio.gather(*(_subscribed(s) for s in streams[:5]))
            with_five = broker_connections(services.pid("gateway-1"), cluster.bootstrap)
            await asyncio.gather(*(_subscribed(s) for s in streams[5:]))
            with_fifty = broker_connections(services.pid("gateway-1"), cluster.bootstrap)
            # a consumer per stream held two connections each (bootstrap and partition leader): +90
            assert with_fifty <= with_five + 2, (with_five, with_fifty)
            got = await asyncio.gather(*(_until_finish(s) for s in streams))
        finally:
            for s in streams:
                await s.aclose()
    for run_id, chunks in zip(runs, got, strict=True):
        assert {c["runId"] for c in chunks} == {run_id}
        assert [c["seq"] for c in chunks] == list(range(len(chunks)))  # in order, once, from the run's first
        assert "".join(c["payload"]["text"] for c in chunks if c["type"] == "text-delta") == "".join(words)


async def test_a_gateway_at_its_maximum_of_streams_answers_503_with_retry_after(services, model):
    info = GatewayInfo.make(free_port())
    await asyncio.to_thread(services.start, "gateway", "gateway-cap", **info.env(),
                            THREADLINE_GATEWAY_MAX_STREAMS="2")
    try:
        model.queue({"text": "made"}, model="threadline-gateway")
        path = thread_path(TENANT_A, f"gwcap-{uuid.uuid4().hex[:10]}")
        async with info.client(info.key_a) as http:
            r = await http.post(f"{path}/generate", json={"message": "hi", "agent_id": "gateway"})
            assert r.status_code == 200, r.text  # its stream was counted, then closed
            open_ = [sse(http, f"{path}/events") for _ in range(2)]
            try:
                await asyncio.gather(*(_subscribed(s) for s in open_))
                refused = await http.get(f"{path}/events")
                assert refused.status_code == 503, refused.text
                assert refused.headers["retry-after"] == "5"
                assert refused.json()["error"]["code"] == "at_capacity"
                await open_[0].aclose()
                async with asyncio.timeout(WAIT_S):  # the gateway sees the browser leave, then serves again
                    while True:
                        again = sse(http, f"{path}/events")
                        try:
                            first = await anext(again)
                            assert first.event == "subscribed"
                            break
                        except httpx.HTTPStatusError as exc:
                            assert exc.response.status_code == 503
                            await asyncio.sleep(0.1)
                        finally:
                            await again.aclose()
            finally:
                for s in open_:
                    await s.aclose()
    finally:
        services.kill("gateway-cap")

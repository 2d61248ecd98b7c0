"""D01 (cases-3): a stream cut off before its first chunk reconnects with a resume point and loses
no gap (decision 214). The ``subscribed`` event carries an ``id:`` (the offset before the stream's
start), so a browser's ``EventSource`` (``ES``) cut off by ``PX`` right after it reconnects after
``retry`` with that ``Last-Event-ID`` and gets every chunk of the run woken while it was away —
the ``data-user-message`` echo, 60 ``text-delta``s and ``finish`` — once each, in ``seq`` order:
(a) from the end, (b) with the run started before the cut and the cut before its first chunk,
(c) from ``from_time_ms``, (d) with the gateway killed and the reconnection served by another,
(e) the Python client over HTTP, the control."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid

import httpx

from tests.e2e.gateway_http import TENANT_A, GatewayInfo, thread_path
from threadline.client import ThreadlineClient
from threadline.testing.containers import free_port
from threadline.testing.event_source import EventSource
from threadline.testing.fault_proxy import FaultProxy

MODEL = "threadline-gateway"
WORDS = [f"w{i} " for i in range(60)]
RETRY_S = 1.0


def _subscribed(es: EventSource) -> bool:
    return any(e.type == "subscribed" for e in es.events)


def _finished(es: EventSource) -> bool:
    return any(e.type == "message" and e.json()["type"] == "finish" for e in es.events)


def _run_chunks(es: EventSource, run_id: str) -> list[dict]:
    return [c for c in (e.json() for e in es.events if e.type == "message") if c["runId"] == run_id]


def _assert_whole(es: EventSource, run_id: str) -> None:
    """The woken run's chunks, each once, in seq order, none missing; the echo, 60 deltas, finish."""
    chunks = _run_chunks(es, run_id)
    seqs = [c["seq"] for c in chunks]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) and seqs[0] == 0, seqs
    types = [c["type"] for c in chunks]
    assert types.count("data-user-message") == 1 and types.count("finish") == 1 and types[-1] == "finish"
    assert [c["payload"]["text"] for c in chunks if c["type"] == "text-delta"] == WORDS


async def _one_cut(gw_url: str, key: str, px: FaultProxy, path: str, *, query: str = "",
                   before_cut: bool = False) -> None:
    """ES through ``px`` on ``path``/events; cut right after ``subscribed``; the run is woken 0.2 s
    after the cut (or 1 s before it, its first chunk 3 s away); ES must end up with all of it."""
    async with httpx.AsyncClient(base_url=px.url, headers={"Authorization": f"Bearer {key}"}) as through, \
            httpx.AsyncClient(base_url=gw_url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as direct:
        es = EventSource(through, f"{path}/events{query}").start()
        try:
            await es.wait_for(_subscribed, 30)
            opening = next(e for e in es.events if e.type == "subscribed")
            assert opening.last_event_id != ""  # the resume point, from the first event on
            if before_cut:
                woken = await direct.post(f"{path}/messages", json={"message": "go", "agent_id": "gateway"})
                await asyncio.sleep(1)
            held = es.last_event_id  # (a), (c): the subscribed id; (b): the run's first chunks came already
            assert held == opening.last_event_id or before_cut
            assert px.cut() == 1
            cut_at = time.monotonic()
            if not before_cut:
                await asyncio.sleep(0.2)
                woken = await direct.post(f"{path}/messages", json={"message": "go", "agent_id": "gateway"})
            assert woken.status_code == 202, woken.text
            await es.wait_for(_finished, 60)
            assert es.sent_ids[:2] == [None, held]  # reconnected with the id it held
            again = next(e for e in es.events if e.connection == 2)
            assert again.at - cut_at <= RETRY_S + 3
            _assert_whole(es, woken.json()["run_id"])
            assert es.retry_ms == 1000 and es.fatal is None
        finally:
            await es.close()


async def _thread_with_a_turn(gw_url: str, key: str, model) -> str:
    model.queue({"text": "earlier"}, model=MODEL)
    path = thread_path(TENANT_A, f"gwd01-{uuid.uuid4().hex[:10]}")
    async with httpx.AsyncClient(base_url=gw_url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        r = await http.post(f"{path}/generate", json={"message": "before", "agent_id": "gateway"})
        assert r.status_code == 200, r.text
    return path


async def test_d01_a_stream_cut_before_its_first_chunk_loses_nothing(services, model):
    info = GatewayInfo.make(free_port())
    info2 = dataclasses.replace(info, port=(port2 := free_port()), url=f"http://127.0.0.1:{port2}")
    await asyncio.gather(asyncio.to_thread(services.start, "gateway", "gateway-d01a", **info.env()),
                         asyncio.to_thread(services.start, "gateway", "gateway-d01b", **info2.env()))
    try:
        async with FaultProxy(("127.0.0.1", info.port)) as px:
            for case in ("a", "a", "a", "b", "c", "c"):
                path = await _thread_with_a_turn(info.url, info.key_a, model)
                slow = {"ttft": 3} if case == "b" else {}
                model.queue({"chunks": WORDS, "chunk_delay": 0.05, **slow}, model=MODEL)
                query = f"?from_time_ms={int(time.time() * 1000)}" if case == "c" else ""
                await _one_cut(info.url, info.key_a, px, path, query=query, before_cut=case == "b")
            await _gateway_killed(services, model, info, info2, px)
        await _client_control(model, info2)  # GW is gone since (d)
    finally:
        for name in ("gateway-d01a", "gateway-d01b"):
            with contextlib.suppress(KeyError):
                services.kill(name)


async def _gateway_killed(services, model, info, info2, px: FaultProxy) -> None:
    """(d) kill -9 of the gateway instead of the cut; the front sends the reconnection to GW2."""
    path = await _thread_with_a_turn(info.url, info.key_a, model)
    model.queue({"chunks": WORDS, "chunk_delay": 0.05}, model=MODEL)
    async with httpx.AsyncClient(base_url=px.url, headers={"Authorization": f"Bearer {info.key_a}"}) as through, \
            httpx.AsyncClient(base_url=info2.url, headers={"Authorization": f"Bearer {info.key_a}"},
                              timeout=60) as direct:
        es = EventSource(through, f"{path}/events").start()
        try:
            await es.wait_for(_subscribed, 30)
            px.target = ("127.0.0.1", info2.port)  # the round-robin front: GW2 from now on
            services.kill("gateway-d01a")
            await asyncio.sleep(0.2)
            woken = await direct.post(f"{path}/messages", json={"message": "go", "agent_id": "gateway"})
            assert woken.status_code == 202, woken.text
            await es.wait_for(_finished, 60)
            assert es.sent_ids[1] == next(e for e in es.events if e.type == "subscribed").last_event_id
            _assert_whole(es, woken.json()["run_id"])
        finally:
            await es.close()


async def _client_control(model, info) -> None:
    """(e) the Python client over HTTP, cut the same way: it seeds its resume point itself."""
    path = await _thread_with_a_turn(info.url, info.key_a, model)
    model.queue({"chunks": WORDS, "chunk_delay": 0.05}, model=MODEL)
    thread = path.rsplit("/", 1)[1]
    async with FaultProxy(("127.0.0.1", int(info.url.rsplit(":", 1)[1]))) as px, \
            ThreadlineClient.connect_http(px.url, api_key=info.key_a) as tl:
        sub = await tl.subscribe_to_thread(TENANT_A, thread)
        px.cut()
        await asyncio.sleep(0.2)
        sent = await tl.send_message("go", resource_id=TENANT_A, thread_id=thread, agent_id="gateway")
        run_id = (await sent.accepted).run_id
        chunks: list[dict] = []
        async with asyncio.timeout(60):
            async for chunk in sub.stream:
                chunks.append(chunk)
                if chunk["type"] == "finish" and chunk["runId"] == run_id:
                    break
        await sub.unsubscribe()
    assert [c["seq"] for c in chunks] == list(range(len(chunks)))
    assert [c["payload"]["text"] for c in chunks if c["type"] == "text-delta"] == WORDS

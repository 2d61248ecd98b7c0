"""D03 (cases-3): HTTP writes with an ``Idempotency-Key`` (decision 213). A retry after an answer
lost on the way back (``PX drop_response``) sends the message once and answers as the first
(``Idempotency-Replayed: true``); the same key with another body is 409 and stores nothing; two
requests at once through two gateways are one; the same key of two resources is two keys; a
``generate`` retried while its run still runs attaches to it; ``HttpThreadlineClient`` retries a
lost answer by itself; the key outlives a gateway restart (kept in PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid

import httpx

from tests.e2e.gateway_http import TENANT_A, TENANT_B, GatewayInfo, thread_path
from tests.e2e.helpers import USER_AUTHORED, rows, wait_idle
from threadline.client import ThreadlineClient
from threadline.testing.containers import free_port
from threadline.testing.fault_proxy import FaultProxy

MODEL = "threadline-gateway"


def _thread() -> str:
    return f"gwd03-{uuid.uuid4().hex[:10]}"


async def _once(dsn: str, model, thread: str, text: str) -> None:
    """One stored user message ``text``, one run, one model request that carries it."""
    assert await wait_idle(dsn, thread, 30)
    users = await rows(dsn, f"SELECT content FROM messages WHERE thread_id = $1 AND {USER_AUTHORED}", thread)
    assert len(users) == 1, users
    runs = await rows(dsn, "SELECT run_id, status FROM runs WHERE thread_id = $1", thread)
    assert len(runs) == 1 and runs[0]["status"] == "finished", runs
    asked = [q for q in model.requests(model=MODEL) if any(text in str(m.get("content")) for m in q["body"]["messages"])]
    assert len(asked) == 1, len(asked)


def _post(http: httpx.AsyncClient, path: str, body: dict, key: str, **kw) -> asyncio.Future:
    return http.post(path, json=body, headers={"Idempotency-Key": key}, **kw)


async def test_d03_a_write_retried_under_its_key_happens_once(services, model, cluster):
    info = GatewayInfo.make(free_port())
    info2 = dataclasses.replace(info, port=(port2 := free_port()), url=f"http://127.0.0.1:{port2}")
    await asyncio.gather(asyncio.to_thread(services.start, "gateway", "gateway-d03a", **info.env()),
                         asyncio.to_thread(services.start, "gateway", "gateway-d03b", **info2.env()))
    try:
        async with info.client(info.key_a) as gw, info2.client(info.key_a) as gw2:
            await _lost_answer_then_retry(cluster.dsn, model, info, gw)
            await _same_key_other_body(cluster.dsn, gw)
            await _at_once_through_two_gateways(cluster.dsn, model, gw, gw2)
            await _one_key_two_resources(cluster.dsn, model, info)
            await _generate_retried_while_running(cluster.dsn, model, gw)
            await _client_retries_by_itself(cluster.dsn, model, info)
            await _mastra_api_too(cluster.dsn, model, gw)
            await _key_outlives_a_restart(services, cluster.dsn, model, info, gw)
    finally:
        for name in ("gateway-d03a", "gateway-d03b"):
            with contextlib.suppress(KeyError):  # already killed by a failing restart
                services.kill(name)


async def _lost_answer_then_retry(dsn, model, info, gw) -> None:
    """(a) the answer is lost (PX drop_response); the retry is answered as the first."""
    model.queue({"text": "charged"}, model=MODEL)
    thread = _thread()
    path, body = f"{thread_path(TENANT_A, thread)}/messages", {"message": f"charge 5 {thread}", "agent_id": "gateway"}
    async with FaultProxy(("127.0.0.1", info.port), mode="drop_response", times=1) as px, \
            httpx.AsyncClient(base_url=px.url, headers={"Authorization": f"Bearer {info.key_a}"}) as through:
        try:
            await _post(through, path, body, "k-1")
            raise AssertionError("the answer was to be lost")
        except httpx.TransportError:
            pass
        assert px.dropped == 1
    again = await _post(gw, path, body, "k-1")
    assert again.status_code == 202, again.text
    assert again.headers["Idempotency-Replayed"] == "true"
    first = await rows(dsn, "SELECT run_id FROM runs WHERE thread_id = $1", thread)
    assert again.json()["action"] == "wake" and again.json()["run_id"] == first[0]["run_id"]
    signals = await rows(dsn, "SELECT id FROM signals WHERE thread_id = $1", thread)
    assert [s["id"] for s in signals] == [again.json()["signal_id"]]
    await _once(dsn, model, thread, f"charge 5 {thread}")
    third = await _post(gw, path, body, "k-1")  # and once more: the kept answer, the same
    assert (third.status_code, third.json(), third.headers["Idempotency-Replayed"]) == (202, again.json(), "true")
    fresh = await gw.post(f"{thread_path(TENANT_A, _thread())}/messages", json=body)
    assert "Idempotency-Replayed" not in fresh.headers  # no key: no replay, as before


async def _same_key_other_body(dsn, gw) -> None:
    """(b) the key of another request: 409, nothing stored."""
    thread = _thread()
    path = f"{thread_path(TENANT_A, thread)}/messages"
    refused = await _post(gw, path, {"message": "charge 6", "agent_id": "gateway"}, "k-1")
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "idempotency_key_reused"
    assert not await rows(dsn, "SELECT 1 FROM signals WHERE thread_id = $1", thread)
    malformed = await _post(gw, path, {"message": "x", "agent_id": "gateway"}, "x" * 256)
    assert malformed.status_code == 422 and malformed.json()["error"]["code"] == "invalid_idempotency_key"


async def _at_once_through_two_gateways(dsn, model, gw, gw2) -> None:
    """(c) the same request at once through GW and GW2: one message, one run, one answer."""
    model.queue({"text": "charged"}, model=MODEL)
    thread = _thread()
    path, body = f"{thread_path(TENANT_A, thread)}/messages", {"message": f"charge 5 {thread}", "agent_id": "gateway"}
    one, two = await asyncio.gather(_post(gw, path, body, "k-2"), _post(gw2, path, body, "k-2"))
    assert (one.status_code, two.status_code) == (202, 202), (one.text, two.text)
    assert one.json() == two.json()
    assert sorted(r.headers.get("Idempotency-Replayed", "") for r in (one, two)) == ["", "true"]
    await _once(dsn, model, thread, f"charge 5 {thread}")


async def _one_key_two_resources(dsn, model, info) -> None:
    """(d) k-3 of res A and k-3 of res B: two writes, each answer its own resource's."""
    model.queue([{"text": "charged"}, {"text": "charged"}], model=MODEL)
    ta, tb = _thread(), _thread()
    async with info.client(info.key_a) as a, info.client(info.key_b) as b:
        ra = await _post(a, f"{thread_path(TENANT_A, ta)}/messages", {"message": f"A {ta}", "agent_id": "gateway"}, "k-3")
        rb = await _post(b, f"{thread_path(TENANT_B, tb)}/messages", {"message": f"B {tb}", "agent_id": "gateway"}, "k-3")
        assert (ra.status_code, rb.status_code) == (202, 202)
        assert "Idempotency-Replayed" not in rb.headers and ra.json()["run_id"] != rb.json()["run_id"]
        assert (await b.get(f"{thread_path(TENANT_A, ta)}/messages")).status_code == 403
    await _once(dsn, model, ta, f"A {ta}")
    await _once(dsn, model, tb, f"B {tb}")


async def _generate_retried_while_running(dsn, model, gw) -> None:
    """(e) the caller gives up after 2 s of a 5 s run and retries at 3 s: one run, its result."""
    model.queue({"chunks": [f"c{i} " for i in range(25)], "chunk_delay": 0.2}, model=MODEL)
    thread = _thread()
    path = f"{thread_path(TENANT_A, thread)}/generate"
    body = {"message": f"charge 7 {thread}", "agent_id": "gateway", "timeout_s": 30}
    try:
        await _post(gw, path, body, "k-4", timeout=2)
        raise AssertionError("the first call was to time out")
    except httpx.TimeoutException:
        pass
    await asyncio.sleep(1)
    retried = await _post(gw, path, body, "k-4", timeout=30)
    assert retried.status_code == 200, retried.text
    assert retried.json()["text"] == "".join(f"c{i} " for i in range(25))
    assert retried.headers["Idempotency-Replayed"] == "true"
    await _once(dsn, model, thread, f"charge 7 {thread}")


async def _client_retries_by_itself(dsn, model, info) -> None:
    """(f) HttpThreadlineClient's first answer is lost; it retries under its own key."""
    model.queue({"text": "charged"}, model=MODEL)
    thread = _thread()
    async with FaultProxy(("127.0.0.1", info.port)) as px, ThreadlineClient.connect_http(px.url, api_key=info.key_a) as tl:
        px.mode, px.times = "drop_response", 1  # the client is connected: its next answer is lost
        sent = await tl.send_message(f"charge 5 {thread}", resource_id=TENANT_A, thread_id=thread, agent_id="gateway")
        accepted = await sent.accepted
        assert px.dropped == 1 and px.connections >= 2
    assert accepted.action == "wake"
    await _once(dsn, model, thread, f"charge 5 {thread}")


async def _mastra_api_too(dsn, model, gw) -> None:
    """Mastra's /api writes take the key as /v1's do: the retry is replayed, another body is 409."""
    model.queue({"text": "charged"}, model=MODEL)
    thread = _thread()
    body = {"message": f"charge 5 {thread}", "resourceId": TENANT_A, "threadId": thread}
    first = await _post(gw, "/api/agents/gateway/send-message", body, "k-api")
    again = await _post(gw, "/api/agents/gateway/send-message", body, "k-api")
    assert first.status_code == again.status_code == 200, (first.text, again.text)
    assert again.json() == first.json() and again.headers["Idempotency-Replayed"] == "true"
    other = await _post(gw, "/api/agents/gateway/send-message", {**body, "message": "charge 6"}, "k-api")
    assert other.status_code == 409 and other.json()["code"] == "idempotency_key_reused"
    await _once(dsn, model, thread, f"charge 5 {thread}")


async def _key_outlives_a_restart(services, dsn, model, info, gw) -> None:
    """(g) as (a), with both gateways restarted between the request and its retry."""
    model.queue({"text": "charged"}, model=MODEL)
    thread = _thread()
    path, body = f"{thread_path(TENANT_A, thread)}/messages", {"message": f"charge 5 {thread}", "agent_id": "gateway"}
    first = await _post(gw, path, body, "k-5")
    assert first.status_code == 202
    for name in ("gateway-d03a", "gateway-d03b"):
        services.kill(name)
    await asyncio.gather(*(asyncio.to_thread(services.start_again, n) for n in ("gateway-d03a", "gateway-d03b")))
    async with info.client(info.key_a) as fresh:
        again = await _post(fresh, path, body, "k-5")
    assert (again.status_code, again.json(), again.headers["Idempotency-Replayed"]) == (202, first.json(), "true")
    await _once(dsn, model, thread, f"charge 5 {thread}")

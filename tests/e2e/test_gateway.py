"""The HTTP gateway (docs/gateway.md): a full turn, generate, a mid-run message, an abort, a resume after
a disconnect, the reads and the inbox, all over HTTP and Server-Sent Events."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx

from tests.e2e.gateway_http import TENANT_A, collect, finished, sse, thread_path
from threadline.gateway import api

ROOT = Path(__file__).resolve().parents[2]


def _thread() -> str:
    return f"gw-{uuid.uuid4().hex[:10]}"


def _types(events) -> list[str]:
    return [e.data["type"] for e in events]


async def test_a_full_turn_over_http_and_sse(gateway, model):
    model.queue({"chunks": ["Hello", " over", " HTTP"]}, model="threadline-gateway")
    path = thread_path(TENANT_A, _thread())
    async with gateway.client(gateway.key_a) as http:
        r = await http.post(f"{path}/messages", json={"message": "hi", "agent_id": "gateway"})
        assert r.status_code == 202, r.text
        accepted = r.json()
        assert accepted["action"] == "wake" and accepted["run_id"]
        events = await collect(http, f"{path}/events", params={"from": "beginning"}, until=finished())
        text = "".join(e.data["payload"]["text"] for e in events if e.data["type"] == "text-delta")
        assert text == "Hello over HTTP"
        assert {e.data["runId"] for e in events} == {accepted["run_id"]}
        seqs = [e.data["seq"] for e in events]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert all(e.id and e.id.endswith(f":{e.data['seq']}:{accepted['run_id']}") for e in events)
        messages = (await http.get(f"{path}/messages")).json()["messages"]
        assert [m["role"] for m in messages] == ["signal", "assistant"]  # a sent message: role signal, as Mastra's
        runs = (await http.get(f"{path}/runs")).json()["runs"]
        assert [(x["run_id"], x["status"]) for x in runs] == [(accepted["run_id"], "finished")]
        threads = (await http.get(f"/v1/resources/{TENANT_A}/threads")).json()["threads"]
        assert path.rsplit("/", 1)[1] in [t["id"] for t in threads]


async def test_generate_waits_for_the_result(gateway, model):
    model.queue({"text": "the answer is 42"}, model="threadline-gateway")
    async with gateway.client(gateway.key_a) as http:
        r = await http.post(f"{thread_path(TENANT_A, _thread())}/generate",
                            json={"message": "question", "agent_id": "gateway", "timeout_s": 60})
        assert r.status_code == 200, r.text
        assert r.json()["text"] == "the answer is 42" and r.json()["finish_reason"] == "stop"


async def test_a_message_mid_run_is_delivered_and_abort_ends_the_run(gateway, model):
    # step 0 streams; the delivered message is taken into step 1 (its echo comes then), which streams slowly
    model.queue([{"chunks": [f"w{i} " for i in range(8)], "chunk_delay": 0.1},
                 {"chunks": [f"x{i} " for i in range(60)], "chunk_delay": 0.15}], model="threadline-gateway")
    path = thread_path(TENANT_A, _thread())
    async with gateway.client(gateway.key_a) as http:
        first = (await http.post(f"{path}/messages", json={"message": "start", "agent_id": "gateway"})).json()
        sent: dict[str, dict] = {}

        async def act(ev) -> None:
            deltas = sum(1 for e in seen if e.data["type"] == "text-delta")
            if deltas >= 2 and "mid" not in sent:
                r = await http.post(f"{path}/messages", json={"message": "also this", "agent_id": "gateway",
                                                              "if_active": {"behavior": "deliver"}})
                sent["mid"] = r.json()
            echoed = [i for i, e in enumerate(seen) if e.data["type"] == "data-user-message"
                      and e.data["data"]["id"] == sent.get("mid", {}).get("signal_id")]
            if echoed and sum(e.data["type"] == "text-delta" for e in seen[echoed[0]:]) >= 2 and "abort" not in sent:
                sent["abort"] = (await http.post(f"{path}/abort", json={})).json()

        seen: list = []

        def until(evs) -> bool:
            seen[:] = evs
            return finished()(evs)

        events = await collect(http, f"{path}/events", params={"from": "beginning"}, until=until, on_event=act)
    assert sent["mid"]["action"] == "deliver" and sent["mid"]["run_id"] == first["run_id"]
    assert sent["abort"] == {"aborted": True}
    types = _types(events)
    assert types[-2:] == ["abort", "finish"]
    assert events[-1].data["payload"]["stepResult"]["reason"] == "abort"


async def test_a_dropped_stream_resumes_after_its_last_event_id(gateway, model):
    model.queue({"chunks": [f"t{i} " for i in range(16)], "chunk_delay": 0.08}, model="threadline-gateway")
    path = thread_path(TENANT_A, _thread())
    async with gateway.client(gateway.key_a) as http:
        await http.post(f"{path}/messages", json={"message": "go", "agent_id": "gateway"})
        part1 = await collect(http, f"{path}/events", params={"from": "beginning"},
                              until=lambda evs: sum(e.data["type"] == "text-delta" for e in evs) >= 4)
        # the connection is closed; the browser reconnects with the last id it saw
        part2 = await collect(http, f"{path}/events", headers={"Last-Event-ID": part1[-1].id}, until=finished())
        replay = await collect(http, f"{path}/events", params={"from": "beginning"}, until=finished())
    joined = [e.data for e in part1 + part2]
    assert [(c["runId"], c["seq"]) for c in joined] == [(c.data["runId"], c.data["seq"]) for c in replay]
    assert len({(c["runId"], c["seq"]) for c in joined}) == len(joined)
    assert "".join(c["payload"]["text"] for c in joined if c["type"] == "text-delta") == "".join(f"t{i} " for i in range(16))


async def test_signals_state_notifications_and_the_inbox(gateway, model):
    path = thread_path(TENANT_A, _thread())
    async with gateway.client(gateway.key_a) as http:
        r = await http.post(f"{path}/signals", json={"agent_id": "gateway", "if_idle": {"behavior": "persist"},
                                                     "signal": {"type": "system-reminder", "contents": "be brief"}})
        assert r.status_code == 202 and r.json()["action"] == "persist", r.text
        r = await http.post(f"{path}/state", json={"agent_id": "gateway", "if_idle": {"behavior": "persist"},
                                                   "state": {"id": "plan", "cache_key": "v1", "contents": "step 1"}})
        assert r.status_code == 202, r.text
        r = await http.post(f"{path}/notifications", json={"agent_id": "gateway", "notifications": {
            "source": "ci", "kind": "build", "summary": "build broke", "priority": "low"}})
        assert r.status_code == 200, r.text
        records = (await http.get(f"{path}/inbox")).json()["records"]
        assert [x["summary"] for x in records] == ["build broke"]
        rid = records[0]["id"]
        assert (await http.get(f"{path}/inbox/{rid}")).json()["id"] == rid
        marked = await http.post(f"{path}/inbox/{rid}", json={"status": "seen"})
        assert marked.status_code == 200 and marked.json()["status"] == "seen"
        assert (await http.get(f"{path}/inbox", params={"status": "seen"})).json()["records"][0]["id"] == rid
        assert (await http.get(f"{path}/inbox/no-such-record")).status_code == 404
        assert (await http.post(f"{path}/inbox/{rid}", json={"status": "eaten"})).status_code == 422
        # an ingress refusal comes back as 422 with its code
        r = await http.post(f"{path}/messages", json={"message": "x", "agent_id": "no-such-agent"})
        assert r.status_code == 422 and r.json()["error"]["code"], r.text


async def test_health_readiness_and_the_openapi_document(gateway):
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        assert (await http.get("/healthz")).text == "ok"
        ready = await http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["checks"] == {"kafka": True, "postgres": True}
        doc = await http.get("/openapi.json")
        assert doc.content == (ROOT / "docs" / "openapi.json").read_bytes() == api.openapi_json()


async def test_the_stream_says_when_it_is_subscribed(gateway, model):
    """``from=end``: the ``subscribed`` event comes once the position is fixed; what is sent after it is seen."""
    model.queue({"text": "late"}, model="threadline-gateway")
    path = thread_path(TENANT_A, _thread())
    async with gateway.client(gateway.key_a) as http:
        await http.post(f"{path}/signals", json={"agent_id": "gateway", "if_idle": {"behavior": "persist"},
                                                 "signal": {"type": "system-reminder", "contents": "create"}})
        got: list = []

        async def read() -> None:
            async for ev in sse(http, f"{path}/events"):
                got.append(ev)
                if ev.event == "subscribed":
                    r = await http.post(f"{path}/messages", json={"message": "now", "agent_id": "gateway"})
                    assert r.status_code == 202
                if ev.event == "message" and ev.data["type"] == "finish":
                    return

        await asyncio.wait_for(read(), 60)
    assert got[0].event == "subscribed" and isinstance(got[0].data["offset"], int)
    assert "".join(e.data["payload"]["text"] for e in got[1:] if e.data["type"] == "text-delta") == "late"


async def test_a_message_too_big_for_a_record_goes_through_without_a_database_at_the_caller(gateway, model):
    """600 KB (over ``max_record_bytes``): the gateway's client stores it by reference; the stream
    resolves the echo chunk that carries it. The HTTP caller holds no PostgreSQL credentials."""
    model.queue({"text": "got it"}, model="threadline-gateway")
    big = "0123456789abcdef" * (600 * 1024 // 16)
    path = thread_path(TENANT_A, _thread())
    async with gateway.client(gateway.key_a) as http:
        r = await http.post(f"{path}/messages", json={"message": big, "agent_id": "gateway"})
        assert r.status_code == 202, r.text
        events = await collect(http, f"{path}/events", params={"from": "beginning"}, until=finished())
        messages = (await http.get(f"{path}/messages")).json()["messages"]
    echo = [e.data for e in events if e.data["type"] == "data-user-message"]
    assert [c["data"]["contents"] for c in echo] == [big]
    assert messages[0]["role"] == "signal" and messages[0]["content"]["parts"][0]["text"] == big

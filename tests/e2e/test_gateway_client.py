"""The Python client over the HTTP gateway (docs/gateway.md): ``ThreadlineClient.connect_http``
with a URL and an API key only. A full turn with a tool call, a message delivered mid-run, the
inbox read and marked, the reads — in a process whose settings and environment name no Kafka
bootstrap and no PostgreSQL DSN, and where opening either would fail the test."""

from __future__ import annotations

import asyncio
import uuid

import aiokafka
import aiokafka.admin
import asyncpg
import pytest

import threadline.config
from tests.e2e.gateway_http import TENANT_A, TENANT_B
from threadline.client import GatewayError, ThreadlineClient
from threadline.events.messages import is_user_authored


class OpenedConnectionError(AssertionError):
    pass


@pytest.fixture
def no_kafka_no_postgres(monkeypatch):
    """No Kafka bootstrap or DSN in the environment; connecting to either, or reading the
    settings (where they live), raises."""
    for name in ("THREADLINE_KAFKA_BOOTSTRAP", "THREADLINE_PG_DSN", "THREADLINE_KAFKA_PORT", "THREADLINE_PG_PORT"):
        monkeypatch.delenv(name, raising=False)

    def refuse(what: str):
        def fail(*_a, **_k):
            raise OpenedConnectionError(f"the HTTP client opened {what}")
        return fail

    monkeypatch.setattr(asyncpg, "connect", refuse("a PostgreSQL connection"))
    monkeypatch.setattr(asyncpg, "create_pool", refuse("a PostgreSQL pool"))
    for cls in (aiokafka.AIOKafkaConsumer, aiokafka.AIOKafkaProducer, aiokafka.admin.AIOKafkaAdminClient):
        monkeypatch.setattr(cls, "start", refuse(f"a Kafka {cls.__name__}"))
    monkeypatch.setattr(threadline.config, "get_settings", refuse("the settings (Kafka / PostgreSQL)"))
    with pytest.raises(OpenedConnectionError):  # the guard itself works
        asyncpg.connect("postgresql://nowhere")


def _thread() -> str:
    return f"gwc-{uuid.uuid4().hex[:10]}"


async def test_a_turn_with_a_tool_call_a_mid_run_message_and_the_inbox_over_http(gateway, model,
                                                                                 no_kafka_no_postgres):
    model.queue([{"tool_calls": [{"id": "t1", "name": "add", "arguments": '{"a":2,"b":3}'}]}, {"text": "it is 5"}],
                model="threadline-gateway-tools")
    thread = _thread()
    async with ThreadlineClient.connect_http(gateway.url, api_key=gateway.key_a) as tl:
        assert (await tl.agent("gateway-tools").details())["id"] == "gateway-tools"
        sub = await tl.subscribe_to_thread(TENANT_A, thread)  # before the thread exists: waits for it
        # a full turn: the run's stream over SSE (AgentHandle.stream → RunOutput)
        out = await tl.agent("gateway-tools").stream("2+3?", {"memory": {"resource": TENANT_A, "thread": thread}})
        chunks = await out.consume_stream(timeout_s=60)
        types = [c["type"] for c in chunks]
        assert "tool-call" in types and types[-1] == "finish"
        assert next(c for c in chunks if c["type"] == "tool-result")["payload"]["result"] == 5
        assert await out.text() == "it is 5"
        seen = []
        async def read_first_run() -> None:
            async for c in sub.stream:
                seen.append(c)
                if c["type"] == "finish":
                    return
        await asyncio.wait_for(read_first_run(), 30)
        assert [(c["runId"], c["seq"]) for c in seen] == [(c["runId"], c["seq"]) for c in chunks]
        assert sub.seen_run_id() is None and await sub.active_run_id() is None

        # a message delivered into the running run
        model.queue([{"chunks": [f"w{i} " for i in range(10)], "chunk_delay": 0.1}, {"chunks": ["y0 ", "y1 "]}],
                    model="threadline-gateway-tools")
        first = await tl.send_message("count", agent_id="gateway-tools", resource_id=TENANT_A, thread_id=thread)
        accepted = await first.accepted
        assert accepted.action == "wake" and first.signal.id == accepted.signal_id
        mid = None
        async def follow() -> list[dict]:
            nonlocal mid
            got = []
            async for c in accepted.output.stream:
                got.append(c)
                if mid is None and sum(x["type"] == "text-delta" for x in got) >= 2:
                    mid = await tl.send_message("also this", agent_id="gateway-tools", resource_id=TENANT_A,
                                                thread_id=thread, if_active={"behavior": "deliver"})
                    assert await tl.active_run_id(resource_id=TENANT_A, thread_id=thread) == accepted.run_id
            return got
        run2 = await asyncio.wait_for(follow(), 60)
        delivered = await mid.accepted
        assert delivered.action == "deliver" and delivered.run_id == accepted.run_id
        echoes = [c for c in run2 if c["type"] == "data-user-message"]
        assert [e["data"]["id"] for e in echoes] == [accepted.signal_id, delivered.signal_id]
        assert "".join(c["payload"]["text"] for c in run2 if c["type"] == "text-delta").endswith("y0 y1 ")

        # the inbox: a notification, read, marked
        notified = await tl.send_notification_signal({"source": "ci", "kind": "build", "summary": "build broke",
                                                      "priority": "low", "payload": {"job": 7}},
                                                     agent_id="gateway-tools", resource_id=TENANT_A, thread_id=thread)
        record_id = notified.results[0]["record"]["id"]
        listed = await tl.inbox(resource_id=TENANT_A, thread_id=thread)
        assert [r["id"] for r in listed] == [record_id] and listed[0]["status"] == "pending"
        full = await tl.read_notification(record_id, resource_id=TENANT_A, thread_id=thread)
        assert full["payload"] == {"job": 7}
        assert (await tl.mark_seen(record_id, resource_id=TENANT_A, thread_id=thread))["status"] == "seen"
        assert await tl.inbox(resource_id=TENANT_A, thread_id=thread, status="pending") == []
        assert await tl.mark_seen("no-such-record", resource_id=TENANT_A, thread_id=thread) is None

        # the reads
        runs = await tl.runs(resource_id=TENANT_A, thread_id=thread)
        assert [r["status"] for r in runs] == ["finished", "finished"]
        stored = await tl.messages(resource_id=TENANT_A, thread_id=thread)
        # a sendMessage is a signal of type user (Mastra's role signal); a notification may add another signal
        roles = ["user" if is_user_authored(m) else m["role"] for m in stored]
        assert [r for r in roles if r != "signal"] == ["user", "assistant"] * 3
        assert thread in [t["id"] for t in await tl.list_threads(resource_id=TENANT_A)]
        assert (await tl.get_thread(resource_id=TENANT_A, thread_id=thread))["resource_id"] == TENANT_A
        await sub.unsubscribe()

        # tenancy holds for this client too: another resource's thread looks missing, a foreign resource is refused
        with pytest.raises(GatewayError) as refused:
            await tl.send_message("x", agent_id="gateway-tools", resource_id=TENANT_B, thread_id=thread)
        assert refused.value.status == 403
    async with ThreadlineClient.connect_http(gateway.url, api_key=gateway.key_b) as other:
        assert await other.get_thread(resource_id=TENANT_B, thread_id=thread) is None
        assert await other.messages(resource_id=TENANT_B, thread_id=thread) == []


async def test_generate_and_abort_over_http(gateway, model, no_kafka_no_postgres):
    model.queue({"text": "the answer"}, model="threadline-gateway-tools")
    thread = _thread()
    async with ThreadlineClient.connect_http(gateway.url, api_key=gateway.key_a) as tl:
        result = await tl.agent("gateway-tools").generate("q", {"memory": {"resource": TENANT_A, "thread": thread}},
                                                          timeout_s=60)
        assert result.text == "the answer" and result.finish_reason == "stop"
        assert await tl.abort(resource_id=TENANT_A, thread_id=thread) is False  # idle
        assert await tl.abort(resource_id=TENANT_A, thread_id=_thread()) is False  # no such thread


async def test_a_kafka_client_reading_through_the_gateway_opens_no_postgres(gateway, model, settings, monkeypatch):
    """Requests and chunks over Kafka, reads over the gateway (``reader=GatewayReader``): the
    turn, the thread, its messages and runs, the active run, with PostgreSQL connections refused."""
    from threadline.client import GatewayReader, KafkaTransport

    def refuse(*_a, **_k):
        raise OpenedConnectionError("the client opened a PostgreSQL connection")

    monkeypatch.setattr(asyncpg, "connect", refuse)
    model.queue({"text": "over both"}, model="threadline-gateway-tools")
    thread = _thread()
    reader = GatewayReader.connect(gateway.url, api_key=gateway.key_a)
    async with ThreadlineClient(transport=KafkaTransport(settings, reader=reader)) as tl:
        sub = await tl.subscribe_to_thread(TENANT_A, thread)
        sent = await tl.send_message("hi", agent_id="gateway-tools", resource_id=TENANT_A, thread_id=thread)
        accepted = await sent.accepted
        assert accepted.action == "wake" and sent.signal is not None and sent.signal.id == accepted.signal_id
        assert await accepted.output.text(timeout_s=60) == "over both"
        for _ in range(100):  # the lease is released just after the finish
            if await sub.active_run_id() is None:
                break
            await asyncio.sleep(0.1)
        assert await sub.active_run_id() is None
        assert (await tl.get_thread(resource_id=TENANT_A, thread_id=thread))["id"] == thread
        first = (await tl.messages(resource_id=TENANT_A, thread_id=thread))[0]
        assert first["role"] == "signal" and is_user_authored(first)  # a sendMessage, as Mastra stores it
        assert [r["run_id"] for r in await tl.runs(resource_id=TENANT_A, thread_id=thread)] == [accepted.run_id]
        assert thread in [t["id"] for t in await tl.list_threads(resource_id=TENANT_A)]
        await sub.unsubscribe()

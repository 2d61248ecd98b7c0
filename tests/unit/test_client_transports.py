"""One ``ThreadlineClient`` over pluggable transports: the in-memory transport users test with,
the gateway's request bodies, and a Kafka client whose reads go through the reader it is given."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest

from threadline.client import (
    GatewayReader,
    HttpThreadlineClient,
    KafkaTransport,
    MemoryTransport,
    PostgresReader,
    ThreadlineClient,
)
from threadline.client.gateway_http import GatewayHttp
from threadline.client.http_transport import ROUTES, body_of
from threadline.client.results import RequestFailed
from threadline.config import Settings
from threadline.events import AbortRequest, Generate, RunResult, SendSignal, SendStateSignal, ToolApprovalRequest
from threadline.events.replies import ErrorReply

NOWHERE = Settings(kafka_bootstrap="127.0.0.1:9", pg_dsn="postgresql://nobody@127.0.0.1:9/none")


def _chunk(run_id: str, seq: int, kind: str = "text-delta", text: str = "", **kw: object) -> dict[str, object]:
    return {"type": kind, "runId": run_id, "seq": seq, "payload": {"text": text} if kind == "text-delta" else {}, **kw}


async def test_a_wake_over_the_memory_transport_streams_what_the_test_emits():
    memory = MemoryTransport()
    async with ThreadlineClient(transport=memory) as tl:
        sub = await tl.subscribe_to_thread("u-1", "t-1", hide_signals=True)
        sent = await tl.send_message("hi", agent_id="a", resource_id="u-1", thread_id="t-1")
        assert sent.signal is not None and sent.signal.id.startswith("sig_")  # known before the reply
        accepted = await sent.accepted
        assert accepted.action == "wake" and accepted.output is not None
        run = accepted.run_id
        memory.emit("u-1", "t-1", {"type": "data-signal", "runId": run, "seq": 0, "data": {"type": "user"}},
                    _chunk(run, 1, text="hel"), _chunk(run, 1, text="hel"), _chunk("other", 0, text="x"),
                    _chunk(run, 2, text="lo"), _chunk(run, 3, "finish"))
        assert await accepted.output.text(timeout_s=5) == "hello"  # the run's own chunks, each once
        seen = [c async for c in _take(sub.stream, 4)]
        assert [c["seq"] for c in seen] == [1, 0, 2, 3]  # the signal echo hidden, the duplicate dropped
        assert sub.cursor() == {run: 3, "other": 0} and sub.seen_run_id() is None
        memory.rows["active_run"] = run
        assert await sub.active_run_id() is None  # its finish was delivered: not active any more
        await sub.unsubscribe()
    assert [r.type for r in memory.requests] == ["send_message"]


async def _take(stream, n: int):
    async for chunk in stream:
        yield chunk
        n -= 1
        if n == 0:
            return


async def test_scripted_replies_reads_and_errors_over_the_memory_transport():
    memory = MemoryTransport()
    memory.answer("generate", lambda req: {"result": RunResult(
        request_id=req.event_id, run_id="run-1", text="scripted", finish_reason="stop")})
    memory.answer("send_signal", lambda req: {"accepted": ErrorReply(request_id=req.event_id, code="unknown_agent",
                                                                     message="no")})
    memory.rows["messages"] = lambda resource_id, thread_id: [{"id": "m1", "thread": thread_id}]
    tl = ThreadlineClient(transport=memory, default_agent="a")
    result = await tl.generate("hi", resource_id="u", thread_id="t", options={"maxSteps": 2})
    assert result.text == "scripted"
    assert isinstance(memory.requests[0], Generate) and memory.requests[0].options == {"maxSteps": 2}
    sent = await tl.send_signal({"type": "notification", "contents": "x"}, resource_id="u", thread_id="t")
    with pytest.raises(RequestFailed) as err:
        await sent.accepted
    assert err.value.code == "unknown_agent"
    assert await tl.messages(resource_id="u", thread_id="t") == [{"id": "m1", "thread": "t"}]
    assert await tl.get_thread(resource_id="u", thread_id="t") is None and await tl.inbox(resource_id="u",
                                                                                          thread_id="t") == []
    assert await tl.abort(resource_id="u", thread_id="t") is False
    with pytest.raises(ValueError, match="status"):
        await tl.mark_notification("n1", "gone", resource_id="u", thread_id="t")
    with pytest.raises(ValueError, match="agent_id"):
        await ThreadlineClient(transport=memory).queue_message("x", resource_id="u", thread_id="t")


async def test_a_reply_that_never_comes_times_out_after_reply_timeout_s():
    memory = MemoryTransport(reply_timeout_s=0.05)
    memory.answer("abort", lambda req: {"aborted": asyncio.get_running_loop().create_future()})  # never answered
    with pytest.raises(TimeoutError):
        await ThreadlineClient(transport=memory).abort(resource_id="u", thread_id="t")
    memory.answer("send_message", lambda req: {"accepted": asyncio.get_running_loop().create_future()})
    sent = await ThreadlineClient(transport=memory).send_message("x", agent_id="a", resource_id="u", thread_id="t")
    with pytest.raises(TimeoutError):
        await sent.accepted


def test_each_request_maps_to_its_gateway_endpoint_with_the_fields_the_caller_gave():
    assert set(ROUTES) == {"send_message", "queue_message", "send_signal", "send_state_signal",
                           "send_notification_signal", "stream", "generate", "abort", "tool_approval"}
    path, body = body_of(SendSignal(agent_id="a", resource_id="u/1", thread_id="t", run_id=None,
                                    signal={"type": "notification", "contents": "c", "tag_name": "gh"}))
    assert path == "/v1/resources/u%2F1/threads/t/signals"
    assert body == {"signal": {"type": "notification", "contents": "c", "tag_name": "gh"}, "agent_id": "a"}
    path, body = body_of(SendStateSignal(agent_id="a", resource_id="u", thread_id="t", signal_id=None,
                                         state={"id": "lane", "cache_key": "k1", "contents": "v"},
                                         if_idle={"behavior": "persist"}))
    assert path.endswith("/state") and body["if_idle"] == {"behavior": "persist"} and "signal_id" not in body
    assert body_of(AbortRequest(agent_id="-", resource_id="u", thread_id="t"))[1] == {}  # no agent named
    assert body_of(Generate(agent_id="a", resource_id="u", thread_id="t", message="m", options={}))[1] == {
        "message": "m", "agent_id": "a", "options": {}}
    approve = ToolApprovalRequest(agent_id="-", resource_id="u", thread_id="t", run_id="r", tool_call_id="c",
                                  approved=True)
    assert body_of(approve) == ("/v1/resources/u/threads/t/approve-tool-call", {"run_id": "r", "tool_call_id": "c"})
    decline = ToolApprovalRequest(agent_id="a", resource_id="u", thread_id="t", run_id="r", tool_call_id="c",
                                  approved=False, reason="no")
    assert body_of(decline) == ("/v1/resources/u/threads/t/decline-tool-call",
                                {"run_id": "r", "tool_call_id": "c", "agent_id": "a", "reason": "no"})


async def test_generate_over_http_waits_for_the_result_with_its_own_timeout():
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200, json={"type": "result", "request_id": "r", "run_id": "run-9", "text": "ok",
                                         "finish_reason": "stop"})

    tl = HttpThreadlineClient("http://gw", transport=httpx.MockTransport(handler), default_agent="a")
    result = await tl.generate("hi", resource_id="u", thread_id="t", timeout_s=12)
    assert result.text == "ok" and result.run_id == "run-9"
    assert orjson.loads(seen[0].content)["timeout_s"] == 12
    assert isinstance(tl, ThreadlineClient) and tl.settings is None and tl.base_url == "http://gw"


async def test_a_kafka_client_reads_through_the_reader_it_is_given_and_needs_no_postgres():
    asked: list[str] = []

    def gateway(req: httpx.Request) -> httpx.Response:
        asked.append(req.url.path)
        if req.url.path.endswith("/active-run"):
            return httpx.Response(200, json={"run_id": "run-7"})
        return httpx.Response(200, json={"messages": [{"id": "m1"}]})

    reader = GatewayReader(GatewayHttp("http://gw", transport=httpx.MockTransport(gateway)))
    tl = ThreadlineClient(transport=KafkaTransport(NOWHERE, reader=reader))
    assert await tl.active_run_id(resource_id="u", thread_id="t") == "run-7"  # PostgreSQL at NOWHERE is not asked
    assert await tl.messages(resource_id="u", thread_id="t") == [{"id": "m1"}]
    assert asked == ["/v1/resources/u/threads/t/active-run", "/v1/resources/u/threads/t/messages"]
    assert isinstance(ThreadlineClient(NOWHERE).transport.reader, PostgresReader)  # type: ignore[attr-defined]  # the default: Kafka


def test_settings_and_a_transport_together_are_refused():
    with pytest.raises(ValueError, match="settings"):
        ThreadlineClient(NOWHERE, transport=MemoryTransport())


async def test_an_unknown_read_is_refused_before_any_connection():
    for reader in (PostgresReader(NOWHERE.pg_dsn), GatewayReader.connect("http://127.0.0.1:9")):
        with pytest.raises(ValueError, match="no read 'read'"):
            await reader.read("read")  # type: ignore[arg-type]  # not a ReadName on purpose
        await reader.close()


async def test_publish_sends_a_raw_request_without_waiting_for_a_reply():
    memory = MemoryTransport()
    memory.answer("abort", lambda req: {"aborted": asyncio.get_running_loop().create_future()})  # never answered
    raw = AbortRequest(agent_id="a", resource_id="u", thread_id="t")
    await asyncio.wait_for(ThreadlineClient(transport=memory).publish(raw), 1)
    assert memory.requests == [raw]

"""The Python client over HTTP (decision 70) against a stand-in gateway (httpx.MockTransport):
how the gateway's answers become the Kafka client's results and errors, and the SSE
subscription's parameters and filter."""

from __future__ import annotations

import httpx
import orjson
import pytest

from threadline.client import GatewayError, HttpThreadSubscription, ThreadlineClient, gateway_http
from threadline.client.client import BrokerUnavailableError, RequestFailed
from threadline.client.http import HttpThreadlineClient


def _client(handler) -> HttpThreadlineClient:
    return HttpThreadlineClient("http://gw", api_key="k-1", transport=httpx.MockTransport(handler))


def _error(status: int, code: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": "m"}})


@pytest.mark.parametrize(("status", "code", "raised"), [
    (422, "unknown_agent", RequestFailed), (403, "forbidden", GatewayError), (401, "unauthenticated", GatewayError),
    (422, "validation_failed", GatewayError), (503, "broker_unavailable", BrokerUnavailableError),
    (504, "timeout", TimeoutError), (404, "not_found", GatewayError)])
async def test_refusals_become_the_clients_errors(status, code, raised, monkeypatch):
    monkeypatch.setattr(gateway_http, "RETRY_DELAYS_S", (0.0, 0.0, 0.0))  # a 503 is retried first (decision 213)
    tl = _client(lambda _req: _error(status, code))
    with pytest.raises(raised):
        await tl.send_message("hi", agent_id="a", resource_id="r", thread_id="t")


async def test_a_send_is_answered_at_once_and_reads_of_a_missing_thread_are_empty():
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        if req.url.path.endswith("/messages") and req.method == "POST":
            return httpx.Response(202, json={"type": "accepted", "request_id": "req-1", "action": "persist",
                                             "signal_id": "sig_1", "signal": {"type": "user", "createdAt": "x"},
                                             "persisted": {"type": "persisted", "request_id": "req-1",
                                                           "signal_id": "sig_1"}})
        return _error(404, "not_found")

    tl = _client(handler)
    sent = await tl.send_message({"contents": "hi", "attributes": {"a": "1"}}, agent_id="a", resource_id="r/1",
                                 thread_id="t 1", if_idle={"behavior": "persist"})
    accepted = await sent.accepted
    assert accepted.action == "persist" and sent.signal.id == "sig_1" and sent.signal.contents == "hi"
    assert (await sent.persisted).signal_id == "sig_1"
    assert seen[0].url.raw_path == b"/v1/resources/r%2F1/threads/t%201/messages"  # ids are one path segment
    assert seen[0].headers["authorization"] == "Bearer k-1"
    assert orjson.loads(seen[0].content) == {"message": {"contents": "hi", "attributes": {"a": "1"}}, "agent_id": "a",
                                             "if_idle": {"behavior": "persist"}}
    assert await tl.get_thread(resource_id="r", thread_id="t") is None
    assert await tl.inbox(resource_id="r", thread_id="t") == [] and await tl.messages(resource_id="r", thread_id="t") == []
    assert await tl.read_notification("n1", resource_id="r", thread_id="t") is None
    assert await tl.abort(resource_id="r", thread_id="t") is False
    with pytest.raises(ValueError):
        await tl.mark_notification("n1", "gone", resource_id="r", thread_id="t")
    assert "k-1" not in repr(tl)


def test_connect_http_reads_no_settings(monkeypatch):
    import threadline.config

    monkeypatch.setattr(threadline.config, "get_settings", lambda: (_ for _ in ()).throw(AssertionError("read")))
    assert isinstance(ThreadlineClient.connect_http("http://gw/", api_key="k"), HttpThreadlineClient)


@pytest.mark.parametrize(("kw", "params", "headers"), [
    ({}, {"from": "end"}, {}),
    ({"from_beginning": True}, {"from": "beginning"}, {}),
    ({"from_offset": 0}, {"from": "beginning"}, {}),
    ({"from_offset": 7}, {}, {"Last-Event-ID": "6"}),
    ({"from_time_ms": 1234}, {"from_time_ms": "1234"}, {}),
])
def test_the_subscription_asks_for_its_start(kw, params, headers):
    sub = HttpThreadSubscription(httpx.AsyncClient(), "/p", **kw)
    assert sub._params() == (params, headers)


def test_the_subscription_skips_what_after_names_and_tracks_the_active_run():
    sub = HttpThreadSubscription(httpx.AsyncClient(), "/p", after={"run-1": 3}, hide_signals=["system-reminder"])
    assert not sub.accept({"runId": "run-1", "seq": 3, "type": "text-delta"})
    assert sub.accept({"runId": "run-1", "seq": 4, "type": "text-delta"}) and sub.seen_run_id() == "run-1"
    assert sub.accept({"runId": "run-1", "seq": 5, "type": "finish"}) and sub.seen_run_id() is None
    assert sub.cursor() == {"run-1": 5}
    assert sub._hidden({"type": "data-signal", "data": {"type": "system-reminder"}})
    assert not sub._hidden({"type": "data-signal", "data": {"type": "other"}})


async def test_a_run_whose_finish_was_delivered_is_not_reported_active_while_its_lease_lags():
    holder: list[str | None] = ["run-1"]

    async def lease() -> str | None:
        return holder[0]

    sub = HttpThreadSubscription(httpx.AsyncClient(), "/p", on_active=lease)
    assert sub.accept({"runId": "run-1", "seq": 0, "type": "text-delta"})
    assert await sub.active_run_id() == "run-1"
    assert sub.accept({"runId": "run-1", "seq": 1, "type": "finish"})
    assert await sub.active_run_id() is None  # the orchestrator has not released the lease yet
    holder[0] = "run-2"  # the next run took the thread
    assert await sub.active_run_id() == "run-2"

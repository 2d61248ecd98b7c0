"""D04 (cases-3): a stream does not outlive the credential that opened it (decision 216). A JWT's
``exp`` bounds every stream it opens: at ``exp`` the gateway sends ``event: error``
``{"code": "token_expired"}`` and ends the stream, so no chunk goes out after ``exp`` + 1 s; a
browser's ``EventSource`` reconnecting to the same URL gets 401 and stops; the Python client over
HTTP ends with ``SubscriptionRefused`` (401). A fresh token resumes from the last event id with no
gap and no duplicate; a token of another resource gets 403. A request authorised at its start
(``generate``) completes; the run is unaffected; no token appears in the gateway's log."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest

from tests.e2e.gateway_http import TENANT_A, TENANT_B, collect, thread_path
from threadline.client import ThreadlineClient
from threadline.client.http_subscription import SubscriptionRefused
from threadline.testing.event_source import EventSource

MODEL = "threadline-gateway"
TICKS = [f"t{i} " for i in range(30)]  # one chunk every 0.5 s: 15 s
EXP_S = 6


def _mono(wall: float) -> float:
    """A wall-clock instant on the monotonic clock ES records arrivals with."""
    return time.monotonic() + (wall - time.time())


async def _client_until_refused(url: str, token: str, thread: str, exp_mono: float) -> list[float]:
    """(b) the Python client over HTTP on the same kind of token: arrival times of its chunks."""
    arrivals: list[float] = []
    async with ThreadlineClient.connect_http(url, api_key=token) as tl:
        sub = await tl.subscribe_to_thread(TENANT_A, thread)
        with pytest.raises(SubscriptionRefused) as refused:
            async with asyncio.timeout(40):
                async for _chunk in sub.stream:
                    arrivals.append(time.monotonic())
        assert refused.value.status == 401
        assert time.monotonic() <= exp_mono + 1 + 3  # refused at the reconnection after the end
    return arrivals


async def test_d04_a_stream_ends_when_its_token_expires(gateway, model, services):
    path = thread_path(TENANT_A, thread := f"gwd04-{uuid.uuid4().hex[:10]}")
    async with gateway.client(gateway.key_a) as http:
        model.queue({"text": "first"}, model=MODEL)
        assert (await http.post(f"{path}/generate", json={"message": "hi", "agent_id": "gateway"})).status_code == 200
        token = gateway.token([TENANT_A], ttl_s=EXP_S)
        exp_mono = _mono(int(time.time() + EXP_S))  # exp is whole seconds
        async with httpx.AsyncClient(base_url=gateway.url) as browser:
            es = EventSource(browser, f"{path}/events?access_token={token}").start()
            client = asyncio.create_task(_client_until_refused(gateway.url, gateway.token([TENANT_A], ttl_s=EXP_S),
                                                               thread, exp_mono))
            try:
                await es.wait_for(lambda s: any(e.type == "subscribed" for e in s.events), 30)
                model.queue({"chunks": TICKS, "chunk_delay": 0.5}, model=MODEL)
                started = await http.post(f"{path}/messages", json={"message": "tick", "agent_id": "gateway"})
                run_id = started.json()["run_id"]
                await es.wait_for(lambda s: s.fatal is not None, 30)
            finally:
                await es.close()
            client_arrivals = await client
        # (a) ended by an error event that says why, in time; nothing after; the reconnection 401
        expired = [e for e in es.events if e.type == "error"]
        assert [e.json()["code"] for e in expired] == ["token_expired"]
        assert expired[0].at <= exp_mono + 1 and expired[0].connection == 1
        chunks = [e for e in es.events if e.type == "message"]
        assert chunks and max(e.at for e in chunks) <= exp_mono + 1
        assert es.fatal == 401 and es.connections == 2
        assert client_arrivals and max(client_arrivals) <= exp_mono + 1  # (b)
        # (c) a fresh token resumes with no gap and no duplicate; another resource's token is refused
        fresh = {"access_token": gateway.token([TENANT_A], ttl_s=300)}
        resumed = await collect(http, f"{path}/events", params=fresh, headers={"Last-Event-ID": es.last_event_id},
                                until=lambda evs: any(e.data["type"] == "finish" for e in evs), timeout_s=60)
        seen = [e.json() for e in chunks] + [e.data for e in resumed]
        ours = [c["seq"] for c in seen if c["runId"] == run_id]
        assert ours == list(range(len(ours))) and seen[-1]["type"] == "finish"
        assert "".join(c["payload"]["text"] for c in seen if c["type"] == "text-delta" and c["runId"] == run_id) \
            == "".join(TICKS)
        other = await http.get(f"{path}/events", params={"access_token": gateway.token([TENANT_B], ttl_s=300)},
                               headers={"Last-Event-ID": es.last_event_id, "Authorization": ""})
        assert other.status_code == 403, other.text
        # (d) a request authorised at its start completes after its token expired
        model.queue({"chunks": TICKS[:10], "chunk_delay": 0.5}, model=MODEL)
        async with gateway.client(gateway.token([TENANT_A], ttl_s=2)) as short:
            done = await short.post(f"{path}/generate", json={"message": "long", "agent_id": "gateway"})
        assert done.status_code == 200 and done.json()["text"] == "".join(TICKS[:10])
        runs = (await http.get(f"{path}/runs")).json()["runs"]
        assert [r["status"] for r in runs] == ["finished"] * 3 and runs[1]["finish_reason"] == "stop"
    log = services.log_path("gateway-1").read_text()
    assert token not in log and token.split(".")[2] not in log

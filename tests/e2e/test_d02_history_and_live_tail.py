"""D02 (cases-3): stored history plus the live stream, joined at a defined seam (decision 215).
``GET …/messages?live_tail=true`` leaves out the turn in progress and names the newest run it holds
(``stream.after_run``); ``GET …/events?after_run=<it>`` sends that turn whole from its first chunk.
Clients that start at staggered instants of a turn with a tool call and a slow answer (before
step 0 is stored, between the steps, during the text, after ``finish``) each end up with every
message once: the answer is the final transcript less the running turn, or all of it, and the
stream brings exactly the rest — the echo of the user's message, the tool call and its result,
the text equal to the run's stored text — never a chunk twice, never one missing, never a chunk
of a turn the answer holds. Studio, opened while a turn streams on a thread whose older turns'
chunks were deleted (Kafka's DeleteRecords, as retention does), shows every turn once: the stored
ones from PostgreSQL, the running one from the stream."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.e2e.gateway_http import TENANT_A, collect, sse, thread_path
from tests.e2e.helpers import wait_idle

MODEL = "threadline-gateway-tools"
AGENT = "gateway-tools"
WORDS = [f"a{i} " for i in range(40)]
STARTS_S = (0.0, 0.2, 0.5, 1.0, 1.5, 2.5, 3.5, 4.5, 5.5, 7.0)
"""When (s after the turn's message was sent) each client starts: the run takes about 5 s."""


async def _client(http, path: str, delay_s: float) -> tuple[list[dict], str | None, list[dict]]:
    """One client of the documented procedure: the stored messages, then the stream from their seam."""
    await asyncio.sleep(delay_s)
    answer = (await http.get(f"{path}/messages", params={"live_tail": "true"})).json()
    messages, after_run = answer["messages"], answer["stream"]["after_run"]
    runs_held = {m["run_id"] for m in messages}
    live: list[dict] = []
    latest = (await http.get(f"{path}/runs")).json()["runs"][-1]["run_id"]
    if latest not in runs_held:  # the answer does not hold the turn: the stream brings it
        params = {"after_run": after_run} if after_run else {"from": "beginning"}
        events = await collect(http, f"{path}/events", params=params, timeout_s=60,
                               until=lambda evs: any(e.data["type"] == "finish" for e in evs))
        live = [e.data for e in events]
    return messages, after_run, live


async def test_d02_stored_history_and_the_live_tail_meet_without_a_gap_or_a_double(gateway, model, cluster):
    path = thread_path(TENANT_A, thread := f"gwd02-{uuid.uuid4().hex[:10]}")
    async with gateway.client(gateway.key_a) as http:
        for i in range(1, 4):  # three finished turns
            model.queue({"text": f"answer {i}"}, model=MODEL)
            r = await http.post(f"{path}/generate", json={"message": f"q{i}", "agent_id": AGENT})
            assert r.status_code == 200, r.text
        model.queue([{"tool_calls": [{"id": "t1", "name": "add", "arguments": '{"a":2,"b":3}'}], "ttft": 0.5},
                     {"chunks": WORDS, "chunk_delay": 0.1}], model=MODEL)
        sent = await http.post(f"{path}/messages", json={"message": "q4", "agent_id": AGENT})
        assert sent.status_code == 202, sent.text
        run_id, started = sent.json()["run_id"], time.monotonic()
        clients = await asyncio.gather(*(_client(http, path, max(0.0, d - (time.monotonic() - started)))
                                         for d in STARTS_S))
        assert await wait_idle(cluster.dsn, thread, 30)
        final = (await http.get(f"{path}/messages", params={"live_tail": "true"})).json()
        plain = (await http.get(f"{path}/messages")).json()
        runs = (await http.get(f"{path}/runs")).json()["runs"]
    assert final["stream"]["after_run"] == run_id  # idle: the answer holds every turn
    assert plain == {"messages": final["messages"], "next_cursor": None}  # without live_tail: as before (one page)
    text = next(r["text"] for r in runs if r["run_id"] == run_id)
    assert text == "".join(WORDS)
    earlier = [m for m in final["messages"] if m["run_id"] != run_id]
    assert len(earlier) == 6 and {m["run_id"] for m in final["messages"]} == {r["run_id"] for r in runs}
    streamed = 0
    for messages, after_run, live in clients:
        if any(m["run_id"] == run_id for m in messages):  # the answer holds the turn: all of it
            assert messages == final["messages"] and live == []
            continue
        streamed += 1
        assert messages == earlier and after_run == runs[-2]["run_id"]
        assert {c["runId"] for c in live} == {run_id}, "a chunk of a turn the answer holds"
        seqs = [c["seq"] for c in live]
        assert seqs == list(range(len(live))), seqs  # from its first chunk, none twice, none missing
        types = [c["type"] for c in live]
        echoes = [c for c in live if c["type"] == "data-user-message"]
        assert [e["data"]["contents"] for e in echoes] == ["q4"]
        assert types.count("tool-call") == 1 and types.count("tool-result") == 1 and types[-1] == "finish"
        assert "".join(c["payload"]["text"] for c in live if c["type"] == "text-delta") == text
    assert streamed >= 5, f"only {streamed} of {len(clients)} clients started during the turn"


async def _delete_all_records(bootstrap: str, topic: str) -> None:
    """Kafka's DeleteRecords up to the end of every partition of ``topic``: its chunks are gone, as
    after retention (the log start offset moves; the messages stay in PostgreSQL)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await consumer.start()
    await admin.start()
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [0])]
        ends = await consumer.end_offsets(parts)
        await admin.delete_records({tp: RecordsToDelete(end) for tp, end in ends.items()})
    finally:
        await admin.close()
        await consumer.stop()


async def test_d02_studio_shows_every_turn_when_the_topic_lost_the_old_ones(gateway, model, cluster):
    from tests.e2e.test_studio import _browser

    executable = _browser()
    playwright_api = pytest.importorskip("playwright.async_api", reason="the playwright package is not installed")
    path = thread_path(TENANT_A, thread := f"gwd02s-{uuid.uuid4().hex[:10]}")
    async with gateway.client(gateway.key_a) as http:
        for i in (1, 2):
            model.queue({"text": f"answer {i}"}, model=MODEL)
            assert (await http.post(f"{path}/generate", json={"message": f"q{i}", "agent_id": AGENT})).status_code == 200
        opened = sse(http, f"{path}/events")
        topic = (await anext(opened)).data["topic"]
        await opened.aclose()
        await _delete_all_records(cluster.bootstrap, topic)  # the first two turns' chunks are gone
        model.queue({"chunks": WORDS, "chunk_delay": 0.1}, model=MODEL)
        assert (await http.post(f"{path}/messages", json={"message": "q3", "agent_id": AGENT})).status_code == 202
        async with playwright_api.async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=executable, headless=True,
                                               args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
            try:
                page = await browser.new_page(bypass_csp=True)
                await page.goto(f"{gateway.url}/studio?resource={TENANT_A}&agent={AGENT}")
                await page.fill("#key", gateway.key_a)
                await page.fill("#threadid", thread)
                await page.press("#threadid", "Enter")  # opened while the third turn streams
                # the third answer whole, streamed or (on a machine slow to open the page) stored
                await page.wait_for_function(
                    "(n) => [...document.querySelectorAll('.assistant')].some((a) => a.textContent.length >= n)",
                    arg=len("".join(WORDS)), timeout=60_000)
                users = await page.locator(".user").all_text_contents()
                texts = await page.locator(".assistant").all_text_contents()
            finally:
                await browser.close()
    assert users == ["q1", "q2", "q3"]
    assert texts == ["answer 1", "answer 2", "".join(WORDS)]

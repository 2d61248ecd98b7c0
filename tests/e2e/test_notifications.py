"""The notification inbox end to end (issue 5, first slice): the default policy's cells, digests,
dedupe vs coalesce, a custom policy (seed example), lifecycle events."""

from __future__ import annotations

import asyncio
import uuid

from tests.e2e.helpers import collect_run, rows, wait_idle
from threadline.client import ThreadlineClient


def _thread() -> str:
    return f"th-note-{uuid.uuid4().hex[:8]}"


def _users(request) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "user"]


async def _notify(tl, thread, agent="notes", **fields):
    note = {"source": "github", "kind": "ci-status", "summary": "CI failed", **fields}
    return (await tl.send_notification_signal(note, agent_id=agent, resource_id="res-1", thread_id=thread)).results[0]


async def _record(dsn, record_id):
    return (await rows(dsn, "SELECT * FROM notifications WHERE id = $1", record_id))[0]


async def test_idle_thread_urgent_high_medium_deliver_and_low_is_a_digest_that_wakes_nothing(
        services, settings, model, cluster):
    async with ThreadlineClient(settings) as tl:
        for priority, reason in (("urgent", "urgent"), ("high", "idle-high"), ("medium", "idle-medium")):
            thread = _thread()
            model.queue([{"chunks": ["noted"]}], model="threadline-notes")
            sub = await tl.subscribe_to_thread("res-1", thread)
            res = await _notify(tl, thread, priority=priority, summary=f"{priority} thing")
            chunks = await collect_run(sub)
            await sub.unsubscribe()
            assert res["decision"]["action"] == "deliver" and res["decision"]["reason"] == reason  # N1, N2, N5
            assert res["accepted"]["action"] == "wake" and res["record"]["status"] == "delivered"
            assert next(c for c in chunks if c["type"] == "data-signal")["data"]["type"] == "notification"
            last = _users(model.requests(model="threadline-notes")[-1])[-1]
            assert last.startswith("<notification ") and f'priority="{priority}"' in last and f">{priority} thing<" in last
        thread = _thread()
        before = len(model.requests(model="threadline-notes"))
        sub = await tl.subscribe_to_thread("res-1", thread)
        low = await _notify(tl, thread, priority="low", summary="fyi")
        digest = await collect_run(sub, timeout_s=20)  # N6: a digest at the next tick, no model call
        await sub.unsubscribe()
    assert low["decision"] == {"action": "summarize", "reason": "idle-low-summary", "summaryAt": low["decision"]["summaryAt"]}
    assert [c["type"] for c in digest] == ["start", "data-signal", "finish"]
    assert digest[1]["data"]["tagName"] == "notification-summary" and digest[1]["data"]["contents"] == "github: 1"
    assert len(model.requests(model="threadline-notes")) == before
    rec = await _record(cluster.dsn, low["record"]["id"])
    assert rec["status"] == "pending" and rec["summary_at"] is None and rec["summary_signal_id"]  # DECISIONS 11


async def test_active_thread_high_summary_now_full_when_idle_and_medium_batched(services, settings, model, cluster):
    thread = _thread()
    model.queue([{"chunks": [f"w{i} " for i in range(12)], "chunk_delay": 0.15}, {"chunks": ["got the summary"]},
                 {"chunks": ["full one read"]}], model="threadline-notes")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        run = await (await tl.send_message("work", agent_id="notes", resource_id="res-1", thread_id=thread)).accepted
        async for chunk in sub.stream:
            if chunk["type"] == "text-delta":
                break
        high = await _notify(tl, thread, priority="high", summary="CI failed (3)", dedupe_key="ci:main")
        again = await _notify(tl, thread, priority="high", summary="CI failed (4)", dedupe_key="ci:main")
        chunks = await collect_run(sub, runs=2, timeout_s=60)
        await sub.unsubscribe()
    assert high["decision"]["reason"] == "active-high-summary-then-full" and high["accepted"]["action"] == "deliver"
    assert again["record"]["id"] == high["record"]["id"] and again["record"]["coalesced_count"] == 2  # dedupe merges
    requests = model.requests(model="threadline-notes")
    assert any(u.startswith("<notification-summary") for u in _users(requests[1]))  # the summary reached run R
    runs = [c["runId"] for c in chunks if c["type"] == "finish"]
    assert runs[0] == run.run_id and runs[1] != run.run_id
    full = [u for u in _users(requests[-1]) if u.startswith("<notification ")]
    assert full and ">CI failed (4)<" in full[-1] and 'coalescedCount="2"' in full[-1]
    rec = await _record(cluster.dsn, high["record"]["id"])
    assert rec["status"] == "delivered" and rec["summarized"] is True
    assert await wait_idle(cluster.dsn, thread)


async def test_coalesce_keeps_records_apart_dedupe_merges_them(services, settings, model, cluster):
    thread = _thread()
    async with ThreadlineClient(settings) as tl:
        n1 = await _notify(tl, thread, priority="low", kind="ci-status", coalesce_key="main")
        n2 = await _notify(tl, thread, priority="low", kind="review-request", coalesce_key="main")
    assert n1["record"]["id"] != n2["record"]["id"]  # C19: different kinds never merge
    await asyncio.sleep(2.5)
    recs = await rows(cluster.dsn, "SELECT summary_signal_id FROM notifications WHERE thread_id = $1", thread)
    assert len(recs) == 2 and all(r["summary_signal_id"] for r in recs)


async def test_custom_policy_seed_example(services, settings, model, cluster):
    thread = _thread()
    async with ThreadlineClient(settings) as tl:
        low = await _notify(tl, thread, agent="notes-custom", priority="low")
        spam = await _notify(tl, thread, agent="notes-custom", priority="urgent", source="spam")
    assert low["decision"]["action"] == "summarize"
    rec = await _record(cluster.dsn, low["record"]["id"])
    assert rec["status"] == "pending" and rec["summary_at"] is not None
    assert 29 * 60 < (rec["summary_at"] - rec["created_at"]).total_seconds() < 31 * 60  # 30 minutes later
    assert spam["decision"]["action"] == "discard" and spam["record"]["status"] == "discarded"  # sources beat priorities


async def test_lifecycle_announces_deliveries(services, settings, model, cluster):
    from aiokafka import AIOKafkaConsumer

    import orjson

    thread = _thread()
    model.queue([{"chunks": ["ok"]}], model="threadline-notes")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        res = await _notify(tl, thread, priority="urgent")
        await collect_run(sub)
        await sub.unsubscribe()
    consumer = AIOKafkaConsumer(f"{cluster.prefix}.lifecycle", bootstrap_servers=cluster.bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    found = []
    try:
        batch = await consumer.getmany(timeout_ms=3000, max_records=100000)
        for records in batch.values():
            for r in records:
                event = orjson.loads(r.value)
                if event.get("thread_id") == thread and event["type"] == "notification_delivered":
                    found.append(event)
    finally:
        await consumer.stop()
    assert len(found) == 1 and found[0]["notification_ids"] == [res["record"]["id"]]


async def test_two_schedulers_deliver_each_of_1000_due_records_once(services, settings, cluster):
    threads = [f"th-bulk-{uuid.uuid4().hex[:6]}-{i}" for i in range(50)]
    import asyncpg

    conn = await asyncpg.connect(cluster.dsn)
    try:
        await conn.executemany("INSERT INTO threads (thread_id, resource_id) VALUES ($1, 'res-bulk')",
                               [(t,) for t in threads])
        await conn.executemany(
            "INSERT INTO notifications (id, thread_id, resource_id, agent_id, source, kind, priority, summary, "
            "summary_at) VALUES ($1, $2, 'res-bulk', 'notes', $3, 'k', 'low', 's', now() + interval '2 seconds')",
            [(f"bulk-{i}", threads[i % len(threads)], f"src{i % 3}") for i in range(1000)])
    finally:
        await conn.close()
    services.start("notification_scheduler", "notification_scheduler-2")
    try:
        for _ in range(120):
            left = await rows(cluster.dsn, "SELECT count(*) AS n FROM notifications WHERE id LIKE 'bulk-%' "
                              "AND summary_signal_id IS NULL")
            if left[0]["n"] == 0:
                break
            await asyncio.sleep(0.5)
        assert left[0]["n"] == 0
    finally:
        services.stop("notification_scheduler-2")
    digests = await rows(cluster.dsn, "SELECT payload FROM signals WHERE resource_id = 'res-bulk'")
    seen: dict[str, int] = {}
    for d in digests:
        for rid in d["payload"]["metadata"]["notification"]["notificationIds"]:
            seen[rid] = seen.get(rid, 0) + 1
    assert len(seen) == 1000 and set(seen.values()) == {1}  # each delivered exactly once
    logs = [(services.log_dir / f"notification_scheduler-{n}.log").read_text() for n in (1, 2)]
    assert all("inbox delivered" in text for text in logs), "both schedulers took part"


async def test_the_inbox_as_an_agent_tool(services, settings, model, cluster):
    from threadline.testing import model_script as ms

    thread = _thread()
    async with ThreadlineClient(settings) as tl:
        rec = await _notify(tl, thread, agent="inbox-agent", priority="low", summary="deploy done",
                            payload={"sha": "abc"})
        rid = rec["record"]["id"]
        model.queue([ms.tool_calls(ms.tool_call("inbox", {"action": "list"})),
                     ms.tool_calls(ms.tool_call("inbox", {"action": "read", "record_id": rid})),
                     ms.tool_calls(ms.tool_call("inbox", {"action": "dismiss", "record_id": rid})),
                     ms.text("handled")], model="threadline-inbox")
        sub = await tl.subscribe_to_thread("res-1", thread)
        await (await tl.send_message("check my inbox", agent_id="inbox-agent", resource_id="res-1",
                                     thread_id=thread)).accepted
        chunks = await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
    results = [c["payload"]["result"] for c in chunks if c["type"] == "tool-result"]
    assert [r["id"] for r in results[0]["records"]] == [rid]
    assert '"sha": "abc"' in results[1]["payload"] or '"sha":"abc"' in results[1]["payload"]
    assert results[2] == {"updated": True, "status": "dismissed"}
    assert (await _record(cluster.dsn, rid))["status"] == "dismissed"

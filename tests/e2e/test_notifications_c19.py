"""Case C19 (docs/cases.md) end to end (inbox dedupe/coalesce, priorities, digests, and a wake after a
restart of all four services), and two notification-schedulers racing over 1,000 due records."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from tests.e2e.helpers import collect_run, rows, run_row, wait_idle
from tests.e2e.records import read_lifecycle
from threadline.client import ThreadlineClient


def _users(request) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "user"]


async def _lifecycle(cluster, thread: str) -> list[dict]:
    return await read_lifecycle(cluster.bootstrap, f"{cluster.prefix}.lifecycle", thread_id=thread)


def _restart_all(services) -> None:
    """Stop every service instance, then start them again (nothing lives on in a process); all at
    once, since a service's start is slow on a loaded machine."""
    from concurrent.futures import ThreadPoolExecutor

    instances = list(services.procs)
    with ThreadPoolExecutor(len(instances)) as pool:
        list(pool.map(services.stop, instances))
        list(pool.map(services.start_again, instances))  # a gateway keeps its port and keys


async def test_c19_inbox_dedupe_coalesce_digest_and_a_wake_after_restarting_everything(
        services, settings, model, cluster):
    thread, res = f"th-c19-{uuid.uuid4().hex[:8]}", "res-c19"
    model.queue([{"chunks": [f"part {i} " for i in range(24)], "chunk_delay": 0.15},  # R streams slowly
                 {"chunks": ["I see CI is failing."]},  # R's next step, after the summary
                 {"chunks": ["CI failed (4): looking."]}],  # the full delivery at idle
                model="threadline-notes-digest")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread(res, thread)
        r = await (await tl.send_message("watch the repo", agent_id="notes-digest", resource_id=res, thread_id=thread)).accepted
        async for chunk in sub.stream:
            if chunk["type"] == "text-delta":
                break  # T is active

        async def send(**note):
            sent = await tl.send_notification_signal({"source": "github", "summary": note.pop("summary", "x"), **note},
                                                     agent_id="notes-digest", resource_id=res, thread_id=thread)
            return sent.results[0]

        n1 = await send(kind="ci-status", priority="low", coalesce_key="main", summary="CI queued")
        n2 = await send(kind="review-request", priority="low", coalesce_key="main", summary="review asked")
        n3 = await send(kind="ci-status", priority="high", dedupe_key="ci:main", summary="CI failed (3)")
        n4 = await send(kind="ci-status", priority="high", dedupe_key="ci:main", summary="CI failed (4)")
        chunks = await collect_run(sub, runs=3, timeout_s=90)  # R, the full delivery's wake, the low digest
        await sub.unsubscribe()

    # the inbox: n1 and n2 two records (kinds differ); n3 and n4 one record holding "CI failed (4)"
    assert n1["record"]["id"] != n2["record"]["id"]
    assert n4["record"]["id"] == n3["record"]["id"]
    high = (await rows(cluster.dsn, "SELECT * FROM notifications WHERE id = $1", n3["record"]["id"]))[0]
    assert high["summary"] == "CI failed (4)" and high["coalesced_count"] == 2 and high["updated_at"] > high["created_at"]
    assert len(await rows(cluster.dsn, "SELECT 1 FROM notifications WHERE thread_id = $1", thread)) == 3

    # while R is active: one summary for the high notification reaches R; the record keeps deliverAt
    assert n3["accepted"] == {"action": "deliver", "run_id": r.run_id} and n3["record"]["deliver_at"]
    assert "accepted" not in n4 and n4["record"]["deliver_at"]
    requests = model.requests(model="threadline-notes-digest")
    assert len(requests) == 3
    summaries = [u for u in _users(requests[1]) if u.startswith("<notification-summary")]
    assert summaries == ['<notification-summary pending="3" priority="high">github: 1</notification-summary>']
    assert not any(u.startswith("<notification ") for u in _users(requests[1]))  # n1/n2 not one by one

    # when T goes idle: the high one in full exactly once, in one wake run; n1/n2 as one digest, no run
    finishes = [i for i, c in enumerate(chunks) if c["type"] == "finish"]
    run_ids = [chunks[i]["runId"] for i in finishes]
    assert run_ids[0] == r.run_id
    wake = run_ids[1]
    full = [u for req in requests for u in _users(req) if u.startswith("<notification ")]
    assert len(full) == 1 and ">CI failed (4)</notification>" in full[0] and 'coalescedCount="2"' in full[0]
    assert full[0] in _users(requests[2])
    assert (await run_row(cluster.dsn, wake))["status"] == "finished"
    digest = chunks[finishes[1] + 1:]
    assert [c["type"] for c in digest] == ["start", "data-signal", "finish"]
    assert digest[1]["data"]["tagName"] == "notification-summary" and digest[1]["data"]["contents"] == "github: 2"
    assert await rows(cluster.dsn, "SELECT 1 FROM runs WHERE run_id = $1", digest[0]["runId"]) == []
    lows = await rows(cluster.dsn, "SELECT status, summary_signal_id, delivered_signal_id FROM notifications "
                      "WHERE id = ANY($1::text[])", [n1["record"]["id"], n2["record"]["id"]])
    assert {(x["status"], x["delivered_signal_id"]) for x in lows} == {("pending", None)}
    assert len({x["summary_signal_id"] for x in lows}) == 1
    assert await wait_idle(cluster.dsn, thread)

    # restart all four services; then n5 wakes T with the agent's configured model
    _restart_all(services)
    model.queue([{"chunks": ["On the outage now."]}], model="threadline-notes-digest")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread(res, thread)
        n5 = (await tl.send_notification_signal({"source": "pagerduty", "kind": "incident", "priority": "urgent",
                                                 "summary": "prod down"}, agent_id="notes-digest", resource_id=res,
                                                thread_id=thread)).results[0]
        after = await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
    assert n5["accepted"]["action"] == "wake" and n5["record"]["status"] == "delivered"
    run5 = await run_row(cluster.dsn, n5["run_id"])
    assert run5["status"] == "finished" and run5["error"] is None
    assert after[-1]["payload"]["finishReason"] == "stop"
    last = model.requests(model="threadline-notes-digest")[-1]
    assert last["body"]["model"] == "threadline-notes-digest" and ">prod down</notification>" in _users(last)[-1]
    assert len(model.requests(model="threadline-notes-digest")) == 4  # no retry loop

    events = await _lifecycle(cluster, thread)
    delivered = [e["notification_ids"] for e in events if e["type"] == "notification_delivered"]
    assert delivered == [[n3["record"]["id"]], [n5["record"]["id"]]]
    summarised = [sorted(e["notification_ids"]) for e in events if e["type"] == "summary_delivered"]
    assert summarised == [[n3["record"]["id"]], sorted([n1["record"]["id"], n2["record"]["id"]])]
    assert not [e for e in events if e["type"] == "run_failed"]


async def test_two_schedulers_deliver_each_of_1000_due_records_once(services, settings, cluster):
    threads = [f"th-bulk-{uuid.uuid4().hex[:6]}-{i}" for i in range(200)]
    services.start("notification_scheduler", "notification_scheduler-2")  # both tick before anything is due
    try:
        conn = await asyncpg.connect(cluster.dsn)
        try:
            await conn.executemany("INSERT INTO threads (thread_id, resource_id) VALUES ($1, 'res-bulk')",
                                   [(t,) for t in threads])
            # low digests on idle threads: cheap deliveries (subscriber-only, no run, no model call). All
            # due at once in one transaction: its NOTIFYs reach both schedulers at the commit, so both
            # start a pass at the same moment and race for the same threads.
            async with conn.transaction():
                await conn.executemany(
                    "INSERT INTO notifications (id, thread_id, resource_id, agent_id, source, kind, priority, summary, "
                    "summary_at) VALUES ($1, $2, 'res-bulk', 'notes', $3, 'k', 'low', 's', now())",
                    [(f"bulk-{i}", threads[i % len(threads)], f"src{i % 3}") for i in range(1000)])
        finally:
            await conn.close()
        for _ in range(240):
            left = await rows(cluster.dsn, "SELECT count(*) AS n FROM notifications WHERE id LIKE 'bulk-%' "
                              "AND summary_signal_id IS NULL")
            if left[0]["n"] == 0:
                break
            await asyncio.sleep(0.5)
        assert left[0]["n"] == 0
    finally:
        services.stop("notification_scheduler-2")
    digests = await rows(cluster.dsn, "SELECT id, payload FROM signals WHERE resource_id = 'res-bulk'")
    seen: dict[str, int] = {}
    for d in digests:
        for rid in d["payload"]["metadata"]["notification"]["notificationIds"]:
            seen[rid] = seen.get(rid, 0) + 1
    assert len(seen) == 1000 and set(seen.values()) == {1}  # each delivered exactly once
    stamped = await rows(cluster.dsn, "SELECT summary_signal_id FROM notifications WHERE id LIKE 'bulk-%'")
    assert {s["summary_signal_id"] for s in stamped} == {d["id"] for d in digests}
    logs = [(services.log_dir / f"notification_scheduler-{n}.log").read_text() for n in (1, 2)]
    assert all("inbox delivered" in text for text in logs), "both schedulers took part"

"""C04: cancelling a run is an abort, not a tripwire; the model call is closed at once."""

from __future__ import annotations

import asyncio
import time
import uuid

from tests.e2e.helpers import USER_AUTHORED, rows, run_row, wait_idle
from threadline.client import ThreadlineClient


async def test_c04_abort_ends_the_run_with_abort_not_a_tripwire(services, settings, model, cluster):
    thread = f"th-{uuid.uuid4().hex[:8]}"
    model.queue([{"chunks": [str(i) for i in range(1, 21)], "chunk_delay": 0.5}], model="threadline-abortable")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        result_fut = asyncio.ensure_future(tl.generate("count slowly", agent_id="abortable", resource_id="res-1",
                                                       thread_id=thread, timeout_s=60))
        chunks, aborted_at = [], None

        async def follow() -> None:
            nonlocal aborted_at
            deltas = 0
            async for chunk in sub.stream:
                chunks.append(chunk)
                if chunk["type"] == "text-delta":
                    deltas += 1
                    if deltas == 2:
                        aborted_at = time.monotonic()
                        assert await sub.abort() is True
                if chunk["type"] == "finish":
                    return

        try:
            await asyncio.wait_for(follow(), 60)
        except TimeoutError:
            raise AssertionError(f"no finish after the abort; saw {[c['type'] for c in chunks]}") from None
        result = await result_fut
        await sub.unsubscribe()
    types = [c["type"] for c in chunks]
    assert "tripwire" not in types and types[-2:] == ["abort", "finish"]
    assert 2 <= types.count("text-delta") <= 3
    assert chunks[-1]["payload"]["stepResult"]["reason"] == "abort"
    assert [c["seq"] for c in chunks] == list(range(chunks[0]["seq"], chunks[0]["seq"] + len(chunks)))
    assert result.finish_reason == "abort" and result.tripwire is None
    run = await run_row(cluster.dsn, result.run_id)
    assert run["status"] == "aborted" and run["tripwire"] is None and run["tripwire_processor_id"] is None
    assert await wait_idle(cluster.dsn, thread)
    # the model's HTTP stream was closed: no further chunk was read from it after the abort
    await asyncio.sleep(1.5)
    journal = model.requests(model="threadline-abortable")
    assert len(journal) == 1
    assert time.monotonic() - aborted_at < 30
    stored = await rows(cluster.dsn, "SELECT role FROM messages WHERE run_id = $1", result.run_id)
    assert [r["role"] for r in stored] == ["user"]  # the input stays; no assistant row


async def test_abort_on_an_idle_thread_aborts_nothing(services, settings):
    async with ThreadlineClient(settings) as tl:
        assert await tl.abort(resource_id="res-1", thread_id=f"th-{uuid.uuid4().hex[:8]}") is False


async def test_c18_follow_ups_survive_the_abort_of_the_active_run_in_order(services, settings, model, cluster):
    thread = f"th-{uuid.uuid4().hex[:8]}"
    model.queue([{"chunks": [f"r{i} " for i in range(40)], "chunk_delay": 0.1},
                 {"chunks": ["answer A"]}, {"chunks": ["answer B"]}], model="threadline-abort-follow-ups")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        r = await (await tl.send_message("start", agent_id="abort-follow-ups", resource_id="res-1", thread_id=thread)).accepted
        seen = 0
        async for chunk in sub.stream:
            if chunk["type"] == "text-delta":
                seen += 1
                if seen == 3:
                    break
        a = await (await tl.send_message("A", agent_id="abort-follow-ups", resource_id="res-1", thread_id=thread,
                                         if_active={"behavior": "deliver"})).accepted
        b = await (await tl.queue_message("B", agent_id="abort-follow-ups", resource_id="res-1", thread_id=thread)).accepted
        assert (a.action, a.run_id) == ("deliver", r.run_id) and b.action == "deliver"
        assert await sub.abort() is True
        finishes = []
        async for chunk in sub.stream:
            if chunk["type"] == "finish":
                finishes.append((chunk["runId"], chunk["payload"]["stepResult"]["reason"]))
                if len(finishes) == 3:
                    break
        await sub.unsubscribe()
    assert finishes[0] == (r.run_id, "abort")
    assert [f[1] for f in finishes[1:]] == ["stop", "stop"] and len({f[0] for f in finishes}) == 3
    assert await wait_idle(cluster.dsn, thread)
    requests = model.requests(model="threadline-abort-follow-ups")
    assert len(requests) == 3
    last_users = [[m["content"] for m in req["body"]["messages"] if m["role"] == "user"][-1] for req in requests[1:]]
    assert last_users == ["A", "B"]  # A before B, each answered once
    sigs = await rows(cluster.dsn, "SELECT payload->>'contents' AS c, status, consumed_by_run FROM signals "
                      "WHERE thread_id = $1 ORDER BY seq", thread)
    by_text = {s["c"]: s for s in sigs}
    assert by_text["A"]["consumed_by_run"] == finishes[1][0] and by_text["B"]["consumed_by_run"] == finishes[2][0]
    assert all(s["status"] == "consumed" for s in sigs)
    users = await rows(cluster.dsn, f"SELECT count(*) AS n FROM messages WHERE thread_id = $1 AND {USER_AUTHORED}", thread)
    assert users[0]["n"] == 3
    assert (await rows(cluster.dsn, "SELECT status FROM runs WHERE run_id = $1", r.run_id))[0]["status"] == "aborted"

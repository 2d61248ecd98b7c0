"""B04: the ids a client sees on the live stream are the stored messages' ids — one assistant
message id for the whole turn (across steps, a discarded attempt and a re-executed attempt), and the
user message's id on its ``data-user-message`` echo (decision 24) — so a client that merges the live
stream with a refetch of the thread by id ends with exactly the stored turn."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tests.e2e.helpers import collect_run, own_instances, rows, wait_idle
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms

FM = "threadline-b04"
LOOKUP = ms.tool_calls(ms.tool_call("lookup", {"id": "C-1"}))


async def _thread(dsn: str, thread: str) -> list[Any]:
    """The thread read (``threadline thread``): the stored messages in order."""
    return await rows(dsn, "SELECT id, run_id, role, content FROM messages WHERE thread_id = $1 ORDER BY position",
                      thread)


def merge_by_id(live: list[dict[str, Any]], stored: list[Any]) -> dict[str, str]:
    """What a client holds after merging the live stream with a refetch: messages keyed by id only
    (live: the user echo's ``data.id``, the assistant's ``messageId``; refetch: ``messages.id``)."""
    merged: dict[str, str] = {}
    for c in live:
        if c["type"] == "data-user-message":
            merged.setdefault(c["data"]["id"], "user")
        elif c["type"] in ("start", "step-start", "step-finish"):
            merged.setdefault(c["payload"]["messageId"], "assistant")
    for r in stored:
        merged.setdefault(r["id"], r["role"])
    return merged


def _check(chunks: list[dict[str, Any]], stored: list[Any], signal_id: str) -> None:
    ids = {c["payload"]["messageId"] for c in chunks if c["type"] in ("start", "step-start", "step-finish")}
    assert len(ids) == 1, ids
    a = ids.pop()
    assert any(c["type"] == "attempt-discarded" for c in chunks)
    assert [(r["role"], r["id"]) for r in stored] == [("signal", signal_id), ("assistant", a)]  # sendMessage: role signal
    echoes = [c for c in chunks if c["type"] == "data-user-message"]
    assert [e["data"]["id"] for e in echoes] == [signal_id] == [stored[0]["id"]]  # decision 24: one id everywhere
    assert stored[0]["content"]["metadata"]["signal"]["id"] == signal_id
    texts = [p["text"] for p in stored[1]["content"]["parts"] if p["type"] == "text"]
    assert texts == ["C-1 is Ann."]
    assert merge_by_id(chunks, stored) == {signal_id: "user", a: "assistant"}  # exactly 2 messages


async def test_b04_one_message_id_across_steps_and_a_discarded_attempt(services, settings, model, cluster):
    thread = f"th-b04-{uuid.uuid4().hex[:6]}"
    model.queue([LOOKUP, ms.text("DRAFT"), ms.text("C-1 is Ann.")], model=FM)
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread, from_beginning=True)
        accepted = await (await tl.send_message("who is C-1?", agent_id="b04", resource_id="res-1",
                                                thread_id=thread)).accepted
        chunks = await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
    assert accepted.action == "wake" and chunks[-1]["payload"]["stepResult"]["reason"] == "stop"
    assert len(model.requests(model=FM)) == 3
    assert await wait_idle(cluster.dsn, thread)
    _check(chunks, await _thread(cluster.dsn, thread), accepted.signal_id)


async def test_b04k_the_re_executed_attempt_keeps_the_message_id(services, settings, model, cluster):
    thread = f"th-b04-{uuid.uuid4().hex[:6]}"
    slow = ms.Script(chunks=["C-1 ", "is ", "Ann", "."], chunk_delay=0.5)
    model.queue([LOOKUP, ms.text("DRAFT"), slow, ms.text("C-1 is Ann.")], model=FM)
    with own_instances(services, "processor_worker", "processor_worker-1", kill=True) as own:
        own.append("processor_worker-b04")
        services.start("processor_worker", "processor_worker-b04")
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread, from_beginning=True)
            accepted = await (await tl.send_message("who is C-1?", agent_id="b04", resource_id="res-1",
                                                    thread_id=thread)).accepted
            seen: list[dict[str, Any]] = []

            async def during_fm3() -> None:  # attempt 2 of step 1 streams its first delta
                async for c in sub.stream:
                    seen.append(c)
                    if c["type"] == "text-delta" and c["step"] == 1 and c["attempt"] == 2:
                        return

            await asyncio.wait_for(during_fm3(), 60)
            services.kill("processor_worker-b04")  # kill -9 mid-stream, then a worker to re-execute the step
            services.start("processor_worker", "processor_worker-1")
            seen += await collect_run(sub, timeout_s=120)
            await sub.unsubscribe()
    assert seen[-1]["payload"]["stepResult"]["reason"] == "stop"
    assert len(model.requests(model=FM)) == 4
    attempts = {c["attempt"] for c in seen if c["step"] == 1 and c["type"] == "step-start"}
    assert len(attempts) >= 2  # the discarded attempt, the crashed one, the re-executed one
    assert await wait_idle(cluster.dsn, thread)
    _check(seen, await _thread(cluster.dsn, thread), accepted.signal_id)

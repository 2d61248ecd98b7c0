"""B10: the retained chunk topic neither copies the model request into step chunks (a big file in
the first message appears once, in its echo, however many steps the run takes) nor replays a failed
run's partial text as a message: the transcript a fresh subscriber rebuilds by the replay rule
(decision 25, :mod:`threadline.client.transcript`) equals the stored thread."""

from __future__ import annotations

import base64
import os
import uuid
from typing import Any

import orjson

from tests.e2e.helpers import collect_run, content, rows, wait_idle
from tests.e2e.records import read_records
from threadline.client import ThreadlineClient
from threadline.client.transcript import replay_transcript, stored_transcript
from threadline.kafka.payloads import resolve
from threadline.store.payloads import PayloadStore
from threadline.testing import model_script as ms
from threadline.topics import Topics

FM = "threadline-b10"
MARKER = b"N10MARKERPDFAAAA"
MIB = 1024 * 1024


def _pdf() -> str:
    """1.5 MiB of base64 text that begins with the marker."""
    body = base64.b64encode(os.urandom(MIB + MIB // 8)).decode()
    return (MARKER.decode() + body)[: MIB + MIB // 2]


async def _resolved(dsn: str, bootstrap: str, topics: list[str], partitions: int) -> list[Any]:
    store = PayloadStore(dsn=dsn)
    try:
        return [await resolve(r, store) for r in await read_records(bootstrap, topics, partitions=partitions)]
    finally:
        await store.close()


async def test_b10_step_chunks_stay_small_and_a_failed_run_replays_as_stored(services, settings, model, cluster):
    thread = f"th-b10-{uuid.uuid4().hex[:6]}"
    noop = [ms.tool_calls(ms.tool_call("noop", {})) for _ in range(4)]
    model.queue([*noop, ms.text("Read it."), ms.text("Partial sum", fail="disconnect", fail_after=2)], model=FM)
    message = [{"type": "text", "text": "see file"}, {"type": "file", "mimeType": "application/pdf", "data": _pdf()}]
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread, from_beginning=True)
        first = await (await tl.send_message(message, agent_id="b10", resource_id="res-1", thread_id=thread)).accepted
        turn1 = await collect_run(sub, timeout_s=120)
        assert await wait_idle(cluster.dsn, thread)
        second = await (await tl.stream("summarise", agent_id="b10", resource_id="res-1", thread_id=thread)).accepted
        turn2 = await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
        assert await wait_idle(cluster.dsn, thread)
        replay = await tl.subscribe_to_thread("res-1", thread, from_beginning=True)  # the fresh subscriber S
        replayed = await collect_run(replay, timeout_s=60, runs=2)
        await replay.unsubscribe()
    assert turn1[-1]["payload"]["stepResult"]["reason"] == "stop"
    assert sum(c["type"] == "step-finish" for c in turn1) == 5 and len(model.requests(model=FM)) == 6
    assert [t for t, _ in content(turn2)[-2:]] == ["error", "finish"]  # error → finish {error}
    assert content(turn2)[-1] == ("finish", "error")

    # the raw chunk topic, references resolved: the marker once, in the echo; step chunks small
    topics = Topics(cluster.prefix)
    records = await _resolved(cluster.dsn, cluster.bootstrap, [topics.chunks("res-1", thread)], 1)
    chunks = [(r, orjson.loads(r.value)) for r in records]
    holders = [c for r, c in chunks if MARKER in r.value]
    assert [c["type"] for c in holders] == ["data-user-message"]
    for r, c in chunks:
        if c["type"] in ("step-start", "step-finish", "finish"):
            assert len(r.value) < 8 * 1024, (c["type"], len(r.value))
    turn1_bytes = sum(len(r.value) for r, c in chunks if c.get("runId") == first.run_id)
    assert turn1_bytes < MIB * 1.5 * 1.4 + 64 * 1024, turn1_bytes
    internal = await _resolved(cluster.dsn, cluster.bootstrap,
                               [topics.step_tasks, topics.step_results, topics.lifecycle, topics.replies], 4)
    assert not [r.topic for r in internal if MARKER in r.value]

    # turn 2 stored its assistant message as Mastra does: what streamed before the failure, then an
    # error part; the replayed transcript equals the stored thread
    stored = await rows(cluster.dsn, "SELECT id, run_id, role, content FROM messages WHERE thread_id = $1 "
                                     "ORDER BY position", thread)
    failed = [m for m in stored if m["run_id"] == second.run_id and m["role"] == "assistant"]
    assert len(failed) == 1
    parts = failed[0]["content"]["parts"] if isinstance(failed[0]["content"], dict) else \
        orjson.loads(failed[0]["content"])["parts"]
    assert parts[-1]["type"] == "error" and parts[-1]["error"]["message"]
    expected = stored_transcript([dict(m) for m in stored])
    assert replay_transcript(replayed) == expected
    assert [m["role"] for m in expected] == ["user", "assistant", "user", "assistant"]
    assert expected[1]["text"] == "Read it." and len(expected[1]["toolCallIds"]) == 4
    assert expected[3]["text"] == "Partial sum"  # what streamed before the disconnect, kept as Mastra keeps it
    assert "Partial" in "".join(c["payload"]["text"] for c in replayed if c["type"] == "text-delta")  # it was streamed

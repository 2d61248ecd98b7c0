"""The idle-topic sweep (docs/decisions.md 40-42) on the real cluster.

An extra notification-scheduler instance runs the sweep with a 2 s idle time (the session's
own scheduler keeps the default 7 days). Checked: an idle thread's chunk topic is deleted (the
broker no longer knows it, its registry row is gone) while its history stays in PostgreSQL; a
subscriber afterwards (of the same client) gets the live chunks of the next run (the topic
created again); a run that starts while its topic is being deleted waits for the deletion and
streams every chunk to the re-created topic.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.e2e.helpers import execute, rows
from threadline.client import ThreadlineClient

RES = "res-topics"
AGENT = "B16"
SWEEPER = "notification_scheduler-topics"


@pytest.fixture(scope="module")
def sweeper(services):
    services.start("notification_scheduler", SWEEPER, THREADLINE_CHUNK_TOPIC_IDLE_S="2",
                   THREADLINE_CHUNK_TOPIC_SWEEP_S="0.5")
    try:
        yield services
    finally:
        services.stop(SWEEPER)


async def _exists(bootstrap: str, topic: str) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        meta = await admin.describe_topics([topic])
        return bool(meta) and meta[0].get("error_code", 0) == 0
    finally:
        await admin.close()


async def _until_gone(cluster: Any, topic: str, timeout_s: float = 40.0) -> None:
    async with asyncio.timeout(timeout_s):
        while await _exists(cluster.bootstrap, topic) or await rows(
                cluster.dsn, "SELECT 1 FROM chunk_topics WHERE topic = $1", topic):
            await asyncio.sleep(0.2)


async def _one_run(sub: Any, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """The subscriber's chunks through the next ``finish``."""
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout_s):
        async for chunk in sub.stream:
            out.append(chunk)
            if chunk["type"] == "finish":
                return out
    return out


def _whole_run(chunks: list[dict[str, Any]]) -> None:
    """One run, every chunk from seq 0 through ``finish``."""
    assert len({c["runId"] for c in chunks}) == 1, chunks
    assert [c["seq"] for c in chunks] == list(range(len(chunks))), [(c["seq"], c["type"]) for c in chunks]
    assert chunks[-1]["type"] == "finish"


async def test_idle_topic_removed_history_kept_and_a_later_subscriber_gets_the_next_run(sweeper, settings,
                                                                                        cluster) -> None:
    thread = f"th-idle-{uuid.uuid4().hex[:10]}"
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread(RES, thread)
        await tl.send_message("first", agent_id=AGENT, resource_id=RES, thread_id=thread)
        _whole_run(await _one_run(sub))
        await sub.unsubscribe()
        topic = sub.topic
        assert await rows(cluster.dsn, "SELECT 1 FROM chunk_topics WHERE topic = $1", topic)
        await _until_gone(cluster, topic)
        history = await rows(cluster.dsn, "SELECT role FROM messages WHERE thread_id = $1 ORDER BY position", thread)
        assert [r["role"] for r in history] == ["signal", "assistant"]  # sendMessage: Mastra's role signal
        # the same client subscribes again (its earlier subscription must not make it trust the topic)
        again = await tl.subscribe_to_thread(RES, thread)
        assert await _exists(cluster.bootstrap, topic)
        await tl.send_message("second", agent_id=AGENT, resource_id=RES, thread_id=thread)
        _whole_run(await _one_run(again))
        await again.unsubscribe()
    history = await rows(cluster.dsn, "SELECT role FROM messages WHERE thread_id = $1 ORDER BY position", thread)
    assert [r["role"] for r in history] == ["signal", "assistant", "signal", "assistant"]


async def test_a_run_starting_during_the_deletion_streams_all_its_chunks(services, settings, cluster) -> None:
    """The sweep is played by hand, slowly: row ``deleting``, 3 s, broker deletion, row removed.
    The run sent meanwhile must wait, then stream every chunk to the re-created topic."""
    thread = f"th-race-{uuid.uuid4().hex[:10]}"
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread(RES, thread)
        await tl.send_message("first", agent_id=AGENT, resource_id=RES, thread_id=thread)
        _whole_run(await _one_run(sub))
        await sub.unsubscribe()
        topic = sub.topic
        await asyncio.sleep(1.5)  # past the services' trust in the topic (0.5 s, tests/e2e/conftest.py)
        await execute(cluster.dsn, "UPDATE chunk_topics SET state = 'deleting' WHERE topic = $1", topic)
        await tl.send_message("second", agent_id=AGENT, resource_id=RES, thread_id=thread)
        await asyncio.sleep(3)  # the run has started and waits for the topic
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await admin.start()
        try:
            await admin.delete_topics([topic])
            async with asyncio.timeout(30):
                while await _exists(cluster.bootstrap, topic):
                    await asyncio.sleep(0.1)
        finally:
            await admin.close()
        await execute(cluster.dsn, "DELETE FROM chunk_topics WHERE topic = $1", topic)
        # the re-created topic, read from its start, holds the whole second run (without the wait
        # in ChunkTopicRegistry.use its first chunks went to the deleted topic)
        again = await tl.subscribe_to_thread(RES, thread, from_beginning=True)
        second = await _one_run(again, timeout_s=60)
        await again.unsubscribe()
    _whole_run(second)

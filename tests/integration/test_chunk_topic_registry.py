"""The chunk-topic registry on PostgreSQL (docs/decisions.md 40-42): which idle topics the sweep
may claim, and that a producer arriving while a topic is ``deleting`` waits for the row to go
and then gets a new row (``inserted``: it creates the topic again)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from threadline.config import Settings
from threadline.store.chunk_topics import (
    ChunkTopicRegistry,
    TopicBeingDeletedError,
    chunk_topic_trust_s,
    claim_idle,
    release,
)
from threadline.store.db import Database


def _names() -> tuple[str, str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"reg.chunks.{tag}", "res-reg", f"th-reg-{tag}"


async def _claimed(db: Database, topic: str) -> bool:
    return topic in [t for t, _, _ in await claim_idle(db, idle_s=0.2, limit=10_000)]


async def test_use_inserts_then_touches_and_only_an_idle_unused_topic_is_claimed(own_cluster) -> None:
    topic, res, thread = _names()
    async with Database(own_cluster.dsn, max_size=2) as db:
        reg = ChunkTopicRegistry(db)
        assert await reg.use(topic, res, thread) == "inserted"
        assert await reg.use(topic, res, thread) == "live"
        assert not await _claimed(db, topic)  # used just now
        await asyncio.sleep(0.4)
        # a running run on the thread keeps the topic
        run_id = f"run-{uuid.uuid4().hex[:8]}"
        await db.execute("INSERT INTO runs (run_id, thread_id, resource_id, agent_id, epoch, updated_at) "
                         "VALUES ($1, $2, $3, 'a', 1, now() - interval '1 hour')", run_id, thread, res)
        assert not await _claimed(db, topic)
        await db.execute("UPDATE runs SET status = 'finished', finished_at = now() WHERE run_id = $1", run_id)
        assert not await _claimed(db, topic)  # the run ended just now: activity
        await db.execute("UPDATE runs SET finished_at = now() - interval '1 hour', created_at = now() - interval "
                         "'1 hour' WHERE run_id = $1", run_id)
        # an unpublished outbox row for the topic keeps it
        box = await db.fetchrow("INSERT INTO outbox (topic, key, headers, value) VALUES ($1, 'k', '[]', 'v') "
                                "RETURNING id", topic)
        assert box is not None
        assert not await _claimed(db, topic)
        await db.execute("UPDATE outbox SET published_at = now() WHERE id = $1", box["id"])
        assert await _claimed(db, topic)
        assert not await _claimed(db, topic)  # claimed once


async def test_a_producer_waits_while_deleting_then_gets_a_new_row(own_cluster) -> None:
    topic, res, thread = _names()
    async with Database(own_cluster.dsn, max_size=3) as db:
        reg = ChunkTopicRegistry(db, wait_s=10)
        await reg.use(topic, res, thread)
        await asyncio.sleep(0.4)
        assert await _claimed(db, topic)
        waiting = asyncio.create_task(reg.use(topic, res, thread))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # no producer takes a topic being deleted
        await release(db, [topic])
        assert await asyncio.wait_for(waiting, 5) == "inserted"
        impatient = ChunkTopicRegistry(db, wait_s=0.3)
        await asyncio.sleep(0.4)
        assert await _claimed(db, topic)
        with pytest.raises(TopicBeingDeletedError):
            await impatient.use(topic, res, thread)


def test_trust_stays_below_a_quarter_of_the_idle_time() -> None:
    assert chunk_topic_trust_s(Settings(chunk_topic_idle_s=7 * 24 * 3600)) == 300.0
    assert chunk_topic_trust_s(Settings(chunk_topic_idle_s=40)) == 10.0
    assert chunk_topic_trust_s(Settings(chunk_topic_idle_s=40, chunk_topic_trust_s=0.5)) == 0.5
    assert chunk_topic_trust_s(Settings(chunk_topic_idle_s=2, chunk_topic_trust_s=60)) == 0.5


async def test_use_many_takes_live_and_new_rows_in_one_statement_and_leaves_out_deleting_ones(own_cluster) -> None:
    (old, res, old_thread), (new, _, new_thread), (dying, _, dying_thread) = _names(), _names(), _names()
    async with Database(own_cluster.dsn, max_size=2) as db:
        reg = ChunkTopicRegistry(db)
        await reg.use(old, res, old_thread)
        await reg.use(dying, res, dying_thread)
        await db.execute("UPDATE chunk_topics SET used_at = now() - interval '1 hour' WHERE topic = $1", old)
        await db.execute("UPDATE chunk_topics SET state = 'deleting' WHERE topic = $1", dying)
        got = await reg.use_many([(old, res, old_thread), (new, res, new_thread), (dying, res, dying_thread)])
        assert sorted(got) == sorted([old, new])
        rows = {r["topic"]: r for r in await db.fetch(
            "SELECT topic, state, used_at > now() - interval '1 minute' AS fresh FROM chunk_topics "
            "WHERE topic = ANY($1::text[])", [old, new, dying])}
        assert rows[old]["fresh"] and rows[new]["state"] == "live"  # touched, inserted
        assert rows[dying]["state"] == "deleting"  # untouched: its producer waits in use()
        assert await reg.use_many([]) == []

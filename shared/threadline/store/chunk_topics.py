"""The chunk-topic registry: which per-thread chunk topics exist, when a producer last took one,
and the idle-topic sweep that deletes those of idle threads (docs/decisions.md 40-42).

The row of a topic (table ``chunk_topics``, migration 0016) orders "use" against "delete":

* :meth:`ChunkTopicRegistry.use` (every producer, before it writes to the topic: a worker per
  step, ingress per request, the scheduler per delivery, the outbox relay) upserts the row with
  ``used_at = now()``; while the row says ``deleting`` it waits until the sweep removed it, then
  inserts a new row and reports ``"inserted"`` (the caller creates the topic again).
* :func:`claim_idle` (the sweep) marks ``deleting`` only rows whose ``used_at`` is older than the
  idle time, whose thread has no running run and no run updated within the idle time, and whose
  topic has no unpublished outbox row, all re-checked under the row lock. After the topic is gone
  from the broker, :func:`release` deletes the row.

So a producer that took the topic within the idle time is never deleted under, and a producer
arriving during a deletion waits for it and writes to the re-created topic, never to the dying one.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from threadline.config import Settings
from threadline.errors import ThreadlineError
from threadline.store.db import Database

_USE = """
INSERT INTO chunk_topics (topic, resource_id, thread_id) VALUES ($1, $2, $3)
ON CONFLICT (topic) DO UPDATE SET used_at = now() WHERE chunk_topics.state = 'live'
RETURNING (xmax = 0) AS inserted
"""

_USE_MANY = """
INSERT INTO chunk_topics (topic, resource_id, thread_id)
SELECT u.topic, u.resource_id, u.thread_id FROM unnest($1::text[], $2::text[], $3::text[])
    AS u(topic, resource_id, thread_id) ORDER BY u.topic
ON CONFLICT (topic) DO UPDATE SET used_at = now() WHERE chunk_topics.state = 'live'
RETURNING topic
"""

_IDLE = """
{c}.state = 'live' AND {c}.used_at < now() - make_interval(secs => $1)
AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.thread_id = {c}.thread_id
                 AND (r.status = 'running'
                      OR GREATEST(r.created_at, r.updated_at, r.finished_at) >= now() - make_interval(secs => $1)))
AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.published_at IS NULL AND o.topic = {c}.topic)
"""

_CLAIM = f"""
UPDATE chunk_topics ct SET state = 'deleting', used_at = now()
 WHERE ct.topic IN (SELECT c.topic FROM chunk_topics c WHERE {_IDLE.format(c="c")}
                     ORDER BY c.used_at LIMIT $2 FOR UPDATE SKIP LOCKED)
   AND {_IDLE.format(c="ct")}
RETURNING ct.topic, ct.resource_id, ct.thread_id
"""

_STALE_DELETING = """
SELECT topic, resource_id, thread_id FROM chunk_topics
 WHERE state = 'deleting' AND used_at < now() - make_interval(secs => $1)
 ORDER BY used_at LIMIT $2 FOR UPDATE SKIP LOCKED
"""


def chunk_topic_trust_s(settings: Settings) -> float:
    """Seconds a process trusts a chunk topic it took through the registry: ``chunk_topic_trust_s``,
    else a quarter of the idle time (the sweep needs the whole idle time without a take), at
    most 5 minutes; never more than a quarter of the idle time."""
    idle = settings.chunk_topic_idle_s
    cap = idle / 4 if idle > 0 else 300.0
    return min(cap, 300.0 if settings.chunk_topic_trust_s is None else settings.chunk_topic_trust_s)


class TopicBeingDeletedError(ThreadlineError, TimeoutError):
    """The topic stayed ``deleting`` longer than the wait allowed (a sweep died mid-deletion and
    its row waits for the next sweep). A ``TimeoutError``: callers treat it as transient."""


class ChunkTopicRegistry:
    """Rows of ``chunk_topics`` for the producers of one process.

    Args:
        db: the service's pool.
        wait_s: how long :meth:`use` waits for a deletion in progress, in seconds.
        poll_s: how often it looks again meanwhile, in seconds.
    """

    def __init__(self, db: Database, *, wait_s: float = 60.0, poll_s: float = 0.05) -> None:
        self._db = db
        self.wait_s = wait_s
        self.poll_s = poll_s

    async def use(self, topic: str, resource_id: str, thread_id: str) -> Literal["inserted", "live"]:
        """Take ``topic`` for producing: ``"live"`` when its row was live (the topic exists or is
        being created by the row's inserter), ``"inserted"`` when this call made the row (the
        caller must create the topic). Waits while the topic is being deleted.

        Raises:
            TopicBeingDeletedError: still ``deleting`` after ``wait_s``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while True:
            row = await self._db.fetchrow(_USE, topic, resource_id, thread_id)
            if row is not None:
                return "inserted" if row["inserted"] else "live"
            if loop.time() >= deadline:
                raise TopicBeingDeletedError(f"chunk topic {topic!r} still being deleted after {self.wait_s} s")
            await asyncio.sleep(self.poll_s)

    async def use_many(self, rows: list[tuple[str, str, str]]) -> list[str]:
        """Take many topics in one statement, ``rows`` as ``(topic, resource_id, thread_id)``
        (distinct topics; the rows are locked in topic order, as every caller does): returns the
        topics whose row was live or is new; a topic missing from the answer is being deleted
        (take it with :meth:`use`, which waits)."""
        if not rows:
            return []
        rows = sorted(rows)
        got = await self._db.fetch(_USE_MANY, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
        return [r["topic"] for r in got]


async def claim_idle(db: Database, *, idle_s: float, limit: int = 200,
                     stale_deleting_s: float = 120.0) -> list[tuple[str, str, str]]:
    """Mark up to ``limit`` idle threads' topics ``deleting`` (see the module text) and return
    them as ``(topic, resource_id, thread_id)``, together with rows left ``deleting`` for
    ``stale_deleting_s`` by a sweep that died (their deletion is finished by this one)."""
    async with db.transaction() as conn:
        rows = await conn.fetch(_CLAIM, float(idle_s), limit)
        stale = await conn.fetch(_STALE_DELETING, float(stale_deleting_s), limit)
    return [(r["topic"], r["resource_id"], r["thread_id"]) for r in [*rows, *stale]]


async def release(db: Database, topics: list[str]) -> None:
    """Delete the rows of topics that are gone from the broker (producers waiting in
    :meth:`ChunkTopicRegistry.use` then insert new rows)."""
    if topics:
        await db.execute("DELETE FROM chunk_topics WHERE state = 'deleting' AND topic = ANY($1::text[])", topics)

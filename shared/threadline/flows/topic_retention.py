"""The idle-topic sweep: deletes the chunk topics of idle threads (docs/decisions.md 40-42).

Every ``chunk_topic_sweep_s`` the notification-scheduler claims idle topics in the registry
(:func:`threadline.store.chunk_topics.claim_idle`: row ``deleting``), deletes them on the broker,
waits until the broker no longer knows them, then deletes their rows; producers waiting for those
rows then create the topics again. A topic the broker does not drop in time keeps its
``deleting`` row and is finished by a later sweep (rows ``deleting`` for 2 minutes are taken up
again), so a sweep that dies half way leaves producers waiting, never writing to a dying topic.
"""

from __future__ import annotations

from threadline._internal.periodic import Periodic
from threadline.kafka.admin import TopicAdmin
from threadline.logging import get_logger
from threadline.store.chunk_topics import claim_idle, release
from threadline.store.db import Database

log = get_logger(__name__)


async def sweep_idle_topics(db: Database, admin: TopicAdmin, *, idle_s: float, limit: int = 200) -> int:
    """One pass: delete up to ``limit`` idle chunk topics; returns how many were deleted.

    Raises what the database or broker raise (the periodic task logs it and tries again).
    """
    claimed = await claim_idle(db, idle_s=idle_s, limit=limit)
    if not claimed:
        return 0
    topics = [t for t, _, _ in claimed]
    gone = await admin.delete_and_wait(topics)
    await release(db, gone)
    for topic, resource_id, thread_id in claimed:
        log.info("idle chunk topic deleted", topic=topic, resource_id=resource_id, thread_id=thread_id)
    return len(gone)


class IdleTopicSweep(Periodic):
    """Background task of the notification-scheduler (not started when ``idle_s`` is 0)."""

    def __init__(self, db: Database, admin: TopicAdmin, *, idle_s: float, interval_s: float) -> None:
        super().__init__("idle-topic-sweep", interval_s,
                         lambda: sweep_idle_topics(db, admin, idle_s=idle_s),
                         failure="idle-topic sweep failed", timeout_s=120.0)

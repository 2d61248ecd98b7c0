"""The outbox after commit: rows queued by this process are published from memory (no read-back
round trip), in id order, and marked published off the caller's path in one ``UPDATE``; ids
from elsewhere are read back, and rows already published are not sent again."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from aiokafka import AIOKafkaConsumer

from threadline.flows.publish import Outbox
from threadline.kafka.admin import TopicAdmin
from threadline.kafka.producer import Producer
from threadline.store import outbox
from threadline.store.db import Database


class CountingDb:
    """The service's Database, counting the statements of its pooled connections."""

    def __init__(self, db: Database) -> None:
        self.db, self.statements = db, 0

    def _log(self, _query: Any) -> None:
        self.statements += 1

    @contextlib.asynccontextmanager
    async def connection(self, *, patient: bool = False):
        async with self.db.connection(patient=patient) as conn:
            conn.add_query_logger(self._log)
            try:
                yield conn
            finally:
                conn.remove_query_logger(self._log)

    async def fetch(self, *args: Any) -> Any:
        async with self.connection() as conn:
            return await conn.fetch(*args)

    async def execute(self, *args: Any) -> Any:
        async with self.connection() as conn:
            return await conn.execute(*args)


async def _values(bootstrap: str, topic: str, n: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                group_id=f"t-{uuid.uuid4().hex[:8]}")
    await consumer.start()
    got: list[bytes] = []
    try:
        async with asyncio.timeout(60):
            while len(got) < n:
                batch = await consumer.getmany(timeout_ms=500)
                got += [r.value for records in batch.values() for r in records]
    finally:
        await consumer.stop()
    return got


async def test_flush_publishes_queued_rows_from_memory_and_reads_back_the_others(cluster):
    topic = f"{cluster.prefix}.outbox-flush-{uuid.uuid4().hex[:6]}"
    admin = TopicAdmin(cluster.bootstrap)
    await admin.start()
    try:
        await admin.ensure([topic])
    finally:
        await admin.stop()
    async with Database(cluster.dsn, max_size=1) as db, Producer(cluster.bootstrap) as producer:
        async with db.transaction() as conn:
            ids = [await outbox.add_raw(conn, topic, f"v{i}".encode(), key="k", headers=[("h", b"x")])
                   for i in range(3)]
            other = int(await outbox.add_raw(conn, topic, b"read-back", key="k", headers=[]))
            done = int(await outbox.add_raw(conn, topic, b"already-published", key="k", headers=[]))
        await db.execute("UPDATE outbox SET published_at = now() WHERE id = $1", done)
        assert all(isinstance(i, outbox.Queued) for i in ids) and ids == sorted(ids)
        counting = CountingDb(db)
        box = Outbox(counting, producer)  # type: ignore[arg-type]
        await box.flush([ids[2], ids[0], ids[1]])  # given out of order: sent in id order
        assert counting.statements == 0  # no read-back; the mark comes after, off this path
        await _all_marked(db, topic, except_ids=[other])
        counting.statements = 0
        await box.flush([other, done])
        assert counting.statements == 1  # plain ids: one read-back
        assert await _values(cluster.bootstrap, topic, 4) == [b"v0", b"v1", b"v2", b"read-back"]
        await _all_marked(db, topic, except_ids=[])


async def _all_marked(db: Database, topic: str, *, except_ids: list[int]) -> None:
    for _ in range(100):
        unmarked = await db.fetch("SELECT id FROM outbox WHERE topic = $1 AND published_at IS NULL "
                                  "AND NOT (id = ANY($2::bigint[]))", topic, except_ids)
        if not unmarked:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"outbox rows never marked published: {unmarked}")

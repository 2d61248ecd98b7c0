"""D14 (cases-3) on a real broker: a member with a backlog — every key's lane holding records it
fetched but has not started — sees a second member join its group (a scale-out). The first
member starts no record of a partition after that partition's revocation; its not-started
records are dropped (logged) and delivered to the new owner, which starts its first record
within 10 s of joining; every record runs, and none runs twice but those that were running at
the revocation (decision 222)."""

from __future__ import annotations

import asyncio
import time
import uuid

from aiokafka import AIOKafkaProducer, TopicPartition

from threadline.kafka.admin import TopicAdmin
from threadline.kafka.consumer import KeyedConsumer

PARTITIONS, KEYS, PER_KEY, HANDLE_S = 4, 8, 6, 0.5


class _Member:
    """A group member whose handler records ``(partition, offset, time)`` at each start."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, log: list) -> None:
        self.name = name
        self.log = log
        self.revoked_at: dict[int, float] = {}
        self.running: set[tuple[int, int]] = set()
        self.running_at_revocation: set[tuple[int, int]] = set()
        self.consumer = KeyedConsumer(bootstrap=bootstrap, topics=[topic], group_id=group, handler=self.handle,
                                      session_timeout_ms=10000)
        revoked = self.consumer._on_revoked

        async def on_revoked(tps: list[TopicPartition]) -> None:  # the moment of each revocation, then the consumer's own
            now = time.monotonic()
            for tp in tps:
                self.revoked_at[tp.partition] = now
            self.running_at_revocation |= {r for r in self.running if r[0] in {tp.partition for tp in tps}}
            await revoked(tps)

        self.consumer._on_revoked = on_revoked  # type: ignore[method-assign]  # observe, then delegate

    async def handle(self, record) -> None:
        key = (record.partition, record.offset)
        self.log.append((self.name, record.partition, record.offset, time.monotonic()))
        self.running.add(key)
        try:
            await asyncio.sleep(HANDLE_S)
        finally:
            self.running.discard(key)


async def test_d14_a_revoked_partitions_queued_records_run_on_the_new_owner_only(own_cluster):
    topic = f"{own_cluster.prefix}.d14-{uuid.uuid4().hex[:6]}"
    admin = TopicAdmin(own_cluster.bootstrap)
    await admin.start()
    try:
        await admin.ensure([topic], partitions=PARTITIONS)
    finally:
        await admin.stop()
    producer = AIOKafkaProducer(bootstrap_servers=own_cluster.bootstrap)
    await producer.start()
    try:
        for _ in range(PER_KEY):
            for k in range(KEYS):
                await producer.send(topic, b"{}", key=f"thread-{k}".encode())
        await producer.flush()
    finally:
        await producer.stop()

    log: list[tuple[str, int, int, float]] = []
    group = f"g-{topic}"
    w1 = _Member("w1", own_cluster.bootstrap, topic, group, log)
    w2 = _Member("w2", own_cluster.bootstrap, topic, group, log)
    await w1.consumer.start()
    try:
        async with asyncio.timeout(30):  # w1 holds the whole backlog: one record running per key
            while len({(p, o) for _, p, o, _ in log}) < KEYS:
                await asyncio.sleep(0.05)
        assert w1.consumer.in_flight == KEYS * PER_KEY
        joined = time.monotonic()
        await w2.consumer.start()
        async with asyncio.timeout(60):
            while len({(p, o) for _, p, o, _ in log}) < KEYS * PER_KEY or w1.consumer.in_flight or w2.consumer.in_flight:
                await asyncio.sleep(0.1)
        await asyncio.sleep(1)  # nothing more comes
    finally:
        await w2.consumer.stop()
        await w1.consumer.stop()

    moved = {p for name, p, _, _ in log if name == "w2"}
    assert moved, "the new member got no partition"
    first_w2 = min(t for name, _, _, t in log if name == "w2")
    assert first_w2 - joined < 10, f"w2 started its first record {first_w2 - joined:.1f} s after joining"
    late = [(p, o) for name, p, o, t in log if name == "w1" and p in w1.revoked_at and t > w1.revoked_at[p]
            and p in moved]
    assert late == [], f"w1 started records of partitions it had lost: {late}"
    starts: dict[tuple[int, int], int] = {}
    for _, p, o, _ in log:
        starts[(p, o)] = starts.get((p, o), 0) + 1
    assert len(starts) == KEYS * PER_KEY
    twice = {k for k, n in starts.items() if n > 1}
    assert twice <= w1.running_at_revocation, f"ran twice without running at the revocation: {twice - w1.running_at_revocation}"

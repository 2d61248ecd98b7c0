"""The outbox never lets one record hold up the others: a row Kafka will not take (here: its topic
does not exist, so its metadata never comes) fails alone, within the outbox's ``ack_timeout_s``;
every other topic's rows are published and marked in the same pass, a key with a failed row keeps
all its rows for the next pass (in their order), and ``flush`` tells its caller which rows wait
for the relay. Before, the first such row failed the whole relay pass (after Kafka's 40 s metadata
wait), every pass, so nothing behind it was ever relayed."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer

from threadline.events.lifecycle import LifecycleEvent
from threadline.flows.publish import Outbox, OutboxNotAcknowledgedError
from threadline.kafka.admin import TopicAdmin
from threadline.kafka.producer import Producer
from threadline.store import outbox as ob
from threadline.store.db import Database


async def _add(db: Database, topic: str, key: str) -> int:
    async with db.transaction() as conn:
        return await ob.add(conn, topic, LifecycleEvent(type="thread_idle", resource_id="res-ob", thread_id=key), key=key)


async def _published(db: Database, ids: list[int]) -> dict[int, bool]:
    rows = await db.fetch("SELECT id, published_at IS NOT NULL AS done FROM outbox WHERE id = ANY($1::bigint[])", ids)
    return {r["id"]: r["done"] for r in rows}


@pytest.fixture
async def parts(own_cluster):
    tag = uuid.uuid4().hex[:8]
    good = f"{own_cluster.prefix}.outbox-probe-{tag}"
    admin = TopicAdmin(own_cluster.bootstrap)
    await admin.start()
    try:
        await admin.ensure([good], partitions=1)
    finally:
        await admin.stop()
    async with Database(own_cluster.dsn, max_size=2, acquire_timeout_s=10) as db, Producer(own_cluster.bootstrap) as producer:
        await db.execute("UPDATE outbox SET published_at = now() WHERE published_at IS NULL")  # this test's rows only
        yield db, Outbox(db, producer, ack_timeout_s=3.0), good, f"{own_cluster.prefix}.no-such-topic-{tag}", tag


async def test_relay_publishes_every_other_topic_past_a_row_kafka_will_not_take(parts, own_cluster):
    db, box, good, missing, tag = parts
    poison = await _add(db, missing, f"k-poison-{tag}")
    same_key_later = await _add(db, good, f"k-poison-{tag}")  # behind the failed row on its key
    others = [await _add(db, good, f"k-{tag}-{i}") for i in range(3)]
    await asyncio.sleep(0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await box.relay_once(older_than_s=0) == 3
    assert loop.time() - started < 20  # bounded by ack_timeout_s, not by Kafka's metadata wait
    done = await _published(db, [poison, same_key_later, *others])
    assert [done[i] for i in others] == [True, True, True]
    assert done[poison] is False and done[same_key_later] is False  # the key keeps its order for the next pass
    # and the later row was not even sent: a relay pass never publishes a key's row past an
    # earlier one of the key that Kafka did not take (decision 65: a run's result after its finish)
    assert f"k-poison-{tag}" not in await _keys_on(own_cluster.bootstrap, good, want=3)


async def _keys_on(bootstrap: str, topic: str, *, want: int) -> list[str]:
    """The keys of the records on ``topic`` (one partition), once ``want`` came and 0.5 s more."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                group_id=f"t-{uuid.uuid4().hex[:8]}")
    await consumer.start()
    keys: list[str] = []
    try:
        async with asyncio.timeout(30):
            while len(keys) < want:
                batch = await consumer.getmany(timeout_ms=300)
                keys += [r.key.decode() for records in batch.values() for r in records if r.key]
        batch = await consumer.getmany(timeout_ms=500)
        keys += [r.key.decode() for records in batch.values() for r in records if r.key]
    finally:
        await consumer.stop()
    return keys


async def test_flush_marks_what_was_taken_and_names_what_waits(parts):
    db, box, good, missing, tag = parts
    poison, fine = await _add(db, missing, f"a-{tag}"), await _add(db, good, f"b-{tag}")
    with pytest.raises(OutboxNotAcknowledgedError) as err:
        await box.flush([poison, fine])
    assert set(err.value.failed) == {poison}
    assert isinstance(err.value, TimeoutError)  # transient: the caller's retry and the relay take it from here
    assert await _published(db, [poison, fine]) == {poison: False, fine: True}


class WedgedProducer:
    """A Kafka client whose acknowledgements never come (seen as a producer that never recovers
    from a broker restart): every send is queued, no future ever resolves."""

    async def send_raw(self, *args: object, **kwargs: object) -> asyncio.Future[None]:
        return asyncio.get_running_loop().create_future()


async def test_a_relay_pass_wedged_on_kafka_lets_the_rows_go_to_another_relay(parts):
    """Relay passes lock their rows (``FOR UPDATE SKIP LOCKED``) while they publish. A pass whose
    acknowledgements never came kept its locks for ever, so every other instance's relay skipped
    those rows: the runs behind them were stranded with a healthy own_cluster around them."""
    db, box, good, _missing, tag = parts
    ids = [await _add(db, good, f"w-{tag}-{i}") for i in range(3)]
    await asyncio.sleep(0.2)
    wedged = Outbox(db, WedgedProducer(), ack_timeout_s=2.0)  # type: ignore[arg-type]  # a stand-in client
    stuck = asyncio.create_task(wedged.relay_once(older_than_s=0))
    await asyncio.sleep(0.5)  # the wedged pass holds the rows now
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    # Another relay publishes them once the wedged pass lets go: this one, or the relay of a
    # service of the same session (the rows are in its outbox too, and soon older than its 2 s).
    while await _published(db, ids) != dict.fromkeys(ids, True) and loop.time() < deadline:
        await box.relay_once(older_than_s=0)
        await asyncio.sleep(0.2)
    assert not stuck.done() or stuck.exception() is None  # the wedged pass gave up cleanly
    stuck.cancel()
    assert await _published(db, ids) == dict.fromkeys(ids, True)

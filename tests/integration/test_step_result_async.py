"""Decision 37: a worker that continues a run publishes the stored step's result in the background
while the next step runs. The result is never lost (a result Kafka does not take stays in the
outbox for the relay), the next step is claimed once, and the run's results reach the
step-results topic in step order — also when the first one failed and went through the relay.
Each case runs twice: with the worker announcing its continued steps itself (decision 103: their
lifecycle rows go out instead of their results, held and refused alike) and with the statement
refusing the announcements (another writer's lifecycle row of the thread waits unpublished, so
every step's result goes to the orchestrator)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaTimeoutError

from tests.integration.test_step_store import _run
from threadline.flows.publish import Outbox
from threadline.kafka.admin import TopicAdmin
from threadline.kafka.producer import Producer
from threadline.runtime.step.ports import Claimed, Continue, Finish, StepRecord
from threadline.store.db import Database
from threadline.topics import Topics, thread_key
from threadline.worker.step_store import PgStepStore

OWNER = "worker-async:1:x"


class HeldProducer:
    """The real producer, except that the first record sent to ``topic`` waits for the test:
    :meth:`release` then sends it for real (``refuse=None``) or refuses it with ``refuse``."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer, self.topic = producer, topic
        self.held: asyncio.Future[Any] | None = None
        self._record: tuple[str, bytes, dict[str, Any]] | None = None

    async def send_raw(self, topic: str, value: bytes, **kw: Any) -> asyncio.Future[Any]:
        if topic == self.topic and self.held is None:
            self.held = asyncio.get_running_loop().create_future()
            self._record = (topic, value, kw)
            return self.held
        return await self.producer.send_raw(topic, value, **kw)

    async def release(self, refuse: BaseException | None) -> None:
        assert self.held is not None and self._record is not None and not self.held.done()
        if refuse is not None:
            self.held.set_exception(refuse)
            return
        topic, value, kw = self._record
        self.held.set_result(await (await self.producer.send_raw(topic, value, **kw)))


ANNOUNCES = pytest.mark.parametrize("announces", [False, True], ids=["results", "announced"])


@contextlib.asynccontextmanager
async def _setup(cluster, announces: bool):
    """A worker's store whose first record for the orchestrator's topic (step 0's: its result, or
    its ``step_finished`` when the worker ``announces``) waits for the test."""
    topics = Topics(cluster.prefix)
    admin = TopicAdmin(cluster.bootstrap)
    await admin.start()
    try:
        await admin.ensure([topics.step_results, topics.lifecycle])
    finally:
        await admin.stop()
    async with Database(cluster.dsn, max_size=4) as db, Producer(cluster.bootstrap) as producer:
        held = HeldProducer(producer, topics.lifecycle if announces else topics.step_results)
        store = PgStepStore(db=db, outbox=Outbox(db, held, ack_timeout_s=5),  # type: ignore[arg-type]  # the wrapper
                            topics=topics, owner=OWNER, lease_ttl_s=60, continues=True)
        yield db, producer, held, store, topics


async def _run_for(db: Database, topics: Topics, announces: bool) -> dict[str, Any]:
    """A run for :func:`_three_steps`; unless ``announces``, with a lifecycle row of its thread
    that another writer queued and never publishes: the save statement then refuses every
    announcement (decision 103's order guard) and queues the step results."""
    r = await _run(db)
    if not announces:
        await db.execute("INSERT INTO outbox (topic, key, value) VALUES ($1, $2, '{}')",
                         topics.lifecycle, thread_key(r["resource_id"], r["thread_id"]))
    return r


async def _in_order(cluster, topics: Topics, run_id: str, announces: bool) -> None:
    """The run's three steps reached Kafka once each, in order: steps 0 and 1 as ``step_finished``
    (announced) or as results, step 2 (the run's end) as its result."""
    if announces:
        assert await _steps(cluster.bootstrap, topics.lifecycle, run_id, 2) == [0, 1]
        assert await _steps(cluster.bootstrap, topics.step_results, run_id, 1) == [2]
    else:
        assert await _steps(cluster.bootstrap, topics.step_results, run_id, 3) == [0, 1, 2]


async def _three_steps(store: PgStepStore, held: HeldProducer, run_id: str,
                       finish: dict[str, Any] | None = None) -> asyncio.Task[None]:
    """Steps 0 and 1 end with ``continue`` (each continued by this worker, the next step handed
    out once), step 2 finishes. The saves of steps 0 and 1 return while the acknowledgement of
    step 0's result is held; the save of step 2 (the run's end) waits for it: returned running."""
    begun = await store.begin(run_id, step=0, epoch=3)
    assert isinstance(begun, Claimed)
    for step in (0, 1):
        async with asyncio.timeout(10):
            await store.save(StepRecord(run=begun.run, attempt=1, outcome=Continue("tool-calls"), entries=[],
                                        consumed=[], state={"steps": list(range(step + 1))}, next_seq=10 * (step + 1),
                                        usage={"totalTokens": 1}))
        await asyncio.sleep(0.2)  # the background publish sends step 0's result
        assert held.held is not None and not held.held.done()  # the save did not wait for it
        nxt = store.take_next(run_id)
        assert isinstance(nxt, Claimed) and (nxt.run.step, nxt.inputs.attempt) == (step + 1, 1)
        assert store.take_next(run_id) is None
        begun = nxt
    last = asyncio.create_task(store.save(StepRecord(
        run=begun.run, attempt=1, outcome=Finish("stop"), entries=[], consumed=[], state={"steps": [0, 1, 2]},
        next_seq=30, usage={"totalTokens": 1}, text="done", finish=finish)))
    await asyncio.sleep(0.3)
    assert not last.done()  # a run's results go out in step order: after step 0's
    return last


async def _steps(bootstrap: str, topic: str, run_id: str, n: int) -> list[int]:
    """The steps of ``run_id``'s results on ``topic``, in topic order, once ``n`` of them came."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                group_id=f"t-{uuid.uuid4().hex[:8]}")
    await consumer.start()
    got: list[int] = []
    try:
        async with asyncio.timeout(60):
            while len(got) < n:
                batch = await consumer.getmany(timeout_ms=500)
                got += [v["step"] for records in batch.values() for rec in records
                        if (v := orjson.loads(rec.value)).get("run_id") == run_id]
            await asyncio.sleep(0.5)  # and no more (a duplicate would show here)
            batch = await consumer.getmany(timeout_ms=500)
            got += [v["step"] for records in batch.values() for rec in records
                    if (v := orjson.loads(rec.value)).get("run_id") == run_id]
    finally:
        await consumer.stop()
    return got


@ANNOUNCES
async def test_results_published_in_the_background_arrive_in_step_order(own_cluster, announces):
    async with _setup(own_cluster, announces) as (db, _producer, held, store, topics):
        r = await _run_for(db, topics, announces)
        last = await _three_steps(store, held, r["run_id"])
        await held.release(None)
        async with asyncio.timeout(10):
            await last
            await store.settle(r["run_id"])
        await _in_order(own_cluster, topics, r["run_id"], announces)
        row = await db.fetchrow("SELECT step, attempt, status FROM runs WHERE run_id = $1", r["run_id"])
        assert (row["step"], row["attempt"], row["status"]) == (2, 1, "finished")


@ANNOUNCES
async def test_a_refused_background_result_is_left_to_the_relay_and_the_later_ones_follow_it(own_cluster,
                                                                                             announces):
    """Kafka refuses step 0's result after the worker went on: nothing is lost (the three results
    stay unpublished in the outbox: steps 1 and 2 must not overtake step 0), the steps were claimed
    once each, and the relay publishes 0, 1, 2 in that order."""
    async with _setup(own_cluster, announces) as (db, producer, held, store, topics):
        r = await _run_for(db, topics, announces)
        last = await _three_steps(store, held, r["run_id"])
        await held.release(KafkaTimeoutError("refused by the test"))
        async with asyncio.timeout(10):
            await last  # left to the relay: the save does not fail (the step is stored)
            await store.settle(r["run_id"])
        rows = await db.fetch("SELECT value, published_at FROM outbox WHERE topic = ANY($1::text[]) ORDER BY id",
                              [topics.step_results, topics.lifecycle])
        mine = [(orjson.loads(x["value"])["step"], x["published_at"]) for x in rows
                if orjson.loads(x["value"]).get("run_id") == r["run_id"]]
        assert mine == [(0, None), (1, None), (2, None)]
        row = await db.fetchrow("SELECT step, attempt, status, continued_from FROM runs WHERE run_id = $1",
                                r["run_id"])
        assert (row["step"], row["attempt"], row["status"]) == (2, 1, "finished")
        assert await Outbox(db, producer).relay_once(older_than_s=0) >= 3
        await _in_order(own_cluster, topics, r["run_id"], announces)


@ANNOUNCES
async def test_the_runs_finish_is_published_while_an_earlier_result_waits_for_kafka(own_cluster, announces):
    """Decision 65: the last step's ``finish`` chunk goes out as soon as the step is stored, not
    after the acknowledgement of an earlier step's result published in the background (before,
    a held acknowledgement held the stream's end with it, for up to the ack timeout, and left
    the ``finish`` with its result to the relay); the result itself still waits its turn."""
    async with _setup(own_cluster, announces) as (db, _producer, held, store, topics):
        r = await _run_for(db, topics, announces)
        chunk_topic = topics.chunks(r["resource_id"], r["thread_id"])
        admin = TopicAdmin(own_cluster.bootstrap)
        await admin.start()
        try:
            await admin.ensure([chunk_topic], partitions=1)
        finally:
            await admin.stop()
        finish = {"type": "finish", "runId": r["run_id"], "seq": 29, "step": 2, "attempt": 1, "payload": {}}
        last = await _three_steps(store, held, r["run_id"], finish=finish)
        consumer = AIOKafkaConsumer(chunk_topic, bootstrap_servers=own_cluster.bootstrap,
                                    auto_offset_reset="earliest", group_id=f"t-{uuid.uuid4().hex[:8]}")
        await consumer.start()
        try:
            seen: list[dict[str, Any]] = []
            async with asyncio.timeout(10):
                while not seen:
                    batch = await consumer.getmany(timeout_ms=200)
                    seen += [orjson.loads(rec.value) for records in batch.values() for rec in records]
        finally:
            await consumer.stop()
        assert [c["type"] for c in seen] == ["finish"]
        assert held.held is not None and not held.held.done() and not last.done()  # step 0's result still held
        await held.release(None)
        async with asyncio.timeout(10):
            await last
            await store.settle(r["run_id"])
        await _in_order(own_cluster, topics, r["run_id"], announces)

"""C20: joining, reconnecting to and replaying a live thread stream yields every chunk once, in
order, with an injected duplicate record dropped. The raw reads go to the thread's partition and
keep its records only, so the test holds in the shared chunk layout too (tests/e2e/test_shared_layout.py)."""

from __future__ import annotations

import asyncio
import uuid

from aiokafka import AIOKafkaProducer, TopicPartition

from tests.e2e.records import thread_records
from threadline.client import ThreadlineClient
from threadline.topics import thread_key


async def _read(sub, *, until_finish: bool = True, limit: int | None = None, out: list | None = None,
                active: list | None = None) -> list[dict]:
    out = [] if out is None else out
    async for chunk in sub.stream:
        out.append(chunk)
        if active is not None and len(out) == 1:
            active.append(sub.seen_run_id())  # known from the first chunk seen, start or not
        if limit is not None and len(out) >= limit:
            break
        if until_finish and chunk["type"] == "finish":
            break
    return out


async def test_c20_attach_late_join_reconnect_and_replay(services, settings, model, cluster):
    thread = f"th-fan-{uuid.uuid4().hex[:6]}"
    model.queue([{"chunks": [f"d{i} " for i in range(150)], "chunk_delay": 0.01}], model="threadline-fanout")
    async with ThreadlineClient(settings) as tl:
        s1 = await tl.subscribe_to_thread("res-1", thread)
        run_id = (await (await tl.send_message("go", agent_id="fanout", resource_id="res-1", thread_id=thread)).accepted).run_id
        s1_chunks: list[dict] = []
        s1_task = asyncio.create_task(_read(s1, out=s1_chunks))
        while len(s1_chunks) < 5:
            await asyncio.sleep(0.005)
        s2 = await tl.subscribe_to_thread("res-1", thread, from_beginning=True)   # from the start of the run
        s2_task = asyncio.create_task(_read(s2))
        while len(s1_chunks) < 10:
            await asyncio.sleep(0.005)
        s3 = await tl.subscribe_to_thread("res-1", thread)                         # live only, missed the start
        s3_chunks: list[dict] = []
        s3_active: list = []
        s3_task = asyncio.create_task(_read(s3, out=s3_chunks, active=s3_active))
        s4 = await tl.subscribe_to_thread("res-1", thread, from_beginning=True)
        first_part = await _read(s4, until_finish=False, limit=13)                 # seq 0..12
        cursor, offset = s4.cursor(), s4.last_offset
        await s4.unsubscribe()
        # fault: one record published twice (same runId and seq)
        topic, key = s1.topic, thread_key("res-1", thread).encode()
        tp = TopicPartition(topic, s1.partition or 0)
        dup = (await thread_records(cluster.bootstrap, tp, key, start=s1.start_offset, at_least=21))[20]  # the 21st
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
        await producer.start()
        await producer.send_and_wait(topic, dup.value, key=dup.key, headers=list(dup.headers), partition=tp.partition)
        await producer.stop()
        s4b = await tl.subscribe_to_thread("res-1", thread, from_offset=offset + 1, after=cursor)
        second_part = await _read(s4b)
        s1_all, s2_all, s3_all = await asyncio.wait_for(asyncio.gather(s1_task, s2_task, s3_task), 60)
        s5 = await tl.subscribe_to_thread("res-1", thread, from_beginning=True)    # full replay afterwards
        s5_all = await _read(s5)
        for sub in (s1, s2, s3, s4b, s5):
            await sub.unsubscribe()
    full = [c["seq"] for c in s1_all]
    assert full == list(range(len(full))) and s1_all[-1]["type"] == "finish"
    for other in (s2_all, s5_all):
        assert [c["seq"] for c in other] == full and [c.get("payload") for c in other] == [c.get("payload") for c in s1_all]
    s3_seqs = [c["seq"] for c in s3_all]
    assert s3_seqs == list(range(s3_seqs[0], len(full))) and s3_seqs[0] > 0  # no gap from the join point
    assert s3_active == [run_id]
    assert [c["seq"] for c in first_part] == list(range(13))
    assert [c["seq"] for c in second_part] == list(range(13, len(full)))  # resumed once each (9 < 10 < 100)
    # on the topic: strictly increasing per run, apart from the injected duplicate
    raw = await thread_records(cluster.bootstrap, tp, key, start=s1.start_offset)
    import orjson

    seqs = [orjson.loads(r.value)["seq"] for r in raw]
    assert len(seqs) == len(full) + 1 and sorted(set(seqs)) == full

"""K8 Kafka consumption semantics under faults: C21 (a failed record is not committed past) and
C22 (a step slower than max_poll_interval_ms is neither expelled nor executed twice)."""

from __future__ import annotations

import asyncio
import time
import uuid

import orjson
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import DefaultPartitioner

from tests.e2e.checker import Figures, check_stream, clean
from tests.e2e.helpers import collect_run, rows, run_row, wait_idle
from tests.e2e.records import end_offset, read_all, read_records
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms
from threadline.testing.harness import wait_file
from threadline.topics import Topics, thread_key


def _same_partition_threads(n_partitions: int, tag: str) -> tuple[str, str, int]:
    part = DefaultPartitioner()
    parts = list(range(n_partitions))
    by_partition: dict[int, str] = {}
    for i in range(1000):
        th = f"th-c21-{tag}-{i}"
        p = part(thread_key("res-1", th).encode(), parts, parts)
        if p in by_partition:
            return by_partition[p], th, p
        by_partition[p] = th
    raise AssertionError("no two threads on one partition")


async def _committed(admin: AIOKafkaAdminClient, group: str, tp: TopicPartition) -> int:
    offsets = await admin.list_consumer_group_offsets(group, partitions=[tp])
    meta = offsets.get(tp)
    return meta.offset if meta is not None else -1


async def test_c21_a_failed_step_task_is_not_committed_past(services, settings, model, cluster, tmp_path):
    topics = Topics(settings.topic_prefix)
    t1, t2, p = _same_partition_threads(settings.partitions, uuid.uuid4().hex[:6])
    tp = TopicPartition(topics.step_tasks, p)
    group = topics.group("processor-worker")
    pause_file = tmp_path / "faults"
    services.stop("processor_worker-1")
    # the first Postgres writes while handling t1 fail: its connection is cut (7 times: ~11 s of retries)
    services.start("processor_worker", "processor_worker-c21", THREADLINE_FAIL_POINTS="step_first_write",
                   THREADLINE_FAIL_TIMES="7", THREADLINE_FAIL_MATCH=t1, THREADLINE_PAUSE_FILE=str(pause_file))
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        async with ThreadlineClient(settings) as tl:
            subs = {t: await tl.subscribe_to_thread("res-1", t) for t in (t1, t2)}
            r1 = (await (await tl.stream("first", agent_id="echo-agent", resource_id="res-1", thread_id=t1)).accepted).run_id
            await asyncio.to_thread(wait_file, pause_file, "step_first_write:failed")
            r2 = (await (await tl.stream("second", agent_id="echo-agent", resource_id="res-1", thread_id=t2)).accepted).run_id
            deadline = time.monotonic() + 60  # the orchestrator publishes t2's task after accepting it
            while True:
                tasks = await read_all(settings.kafka_bootstrap, [topics.step_tasks], partitions=settings.partitions)
                if {t["run_id"] for t in tasks} >= {r1, r2} or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            assert [t["thread_id"] for t in tasks if t["run_id"] in (r1, r2)] == [t1, t2]
            offsets = {}  # offset of each run's step task on P
            for rec in await _records(settings.kafka_bootstrap, tp):
                offsets.setdefault(rec[1], rec[0])
            o1, o2 = offsets[r1], offsets[r2]
            assert o1 < o2
            c2 = await collect_run(subs[t2], timeout_s=60)  # t2 finishes while t1 is still failing
            assert (await run_row(cluster.dsn, r2))["status"] == "finished"
            samples = []
            while (await rows(cluster.dsn, "SELECT status FROM runs WHERE run_id = $1", r1))[0]["status"] == "running":
                samples.append(await _committed(admin, group, tp))
                await asyncio.sleep(0.3)
            assert samples and max(samples) <= o1, (samples, o1)  # never past the unfinished t1
            c1 = await collect_run(subs[t1], timeout_s=60)
            for s in subs.values():
                await s.unsubscribe()
        assert pause_file.read_text().count("step_first_write:failed") == 7
        assert (await run_row(cluster.dsn, r1))["status"] == "finished"  # completed after the retries
        # restart the worker: nothing runs twice, lag returns to 0
        services.stop("processor_worker-c21")
        services.start("processor_worker", "processor_worker-1")
        deadline = time.monotonic() + 60
        while True:
            committed = await _committed(admin, group, tp)
            end = (await end_offset(settings.kafka_bootstrap, tp))
            if committed == end:
                break
            assert time.monotonic() < deadline, f"lag stays {end - committed}"
            await asyncio.sleep(0.5)
    finally:
        await admin.close()
        if "processor_worker-c21" in services.procs:
            services.stop("processor_worker-c21")
        if "processor_worker-1" not in services.procs:
            services.start("processor_worker", "processor_worker-1")
    for run_id, chunks in ((r1, c1), (r2, c2)):
        fig = Figures()
        check_stream(run_id, clean(chunks, fig)[run_id], fig)
        assert fig.ok, fig.problems
    for _run_id, thread in ((r1, t1), (r2, t2)):
        stored = await rows(cluster.dsn, "SELECT role FROM messages WHERE thread_id = $1", thread)
        assert sorted(m["role"] for m in stored) == ["assistant", "user"]  # no duplicate rows
        assert await wait_idle(cluster.dsn, thread)
    letters = await read_all(settings.kafka_bootstrap, [topics.dead_letters], partitions=settings.partitions)
    assert not [d for d in letters if (d.get("key") or "").endswith((t1, t2))]


async def _records(bootstrap: str, tp: TopicPartition) -> list[tuple[int, str]]:
    """(offset, run id) of every record of one partition."""
    return [(r.offset, orjson.loads(r.value).get("run_id"))
            for r in await read_records(bootstrap, [tp.topic], partitions=None) if r.partition == tp.partition]


async def test_c22_a_step_slower_than_the_poll_interval_runs_once(services, settings, model, cluster):
    """processor-worker × 2 with max_poll_interval_ms = 10000; the model's first byte after 15 s."""
    thread = f"th-c22-{uuid.uuid4().hex[:6]}"
    env = {"THREADLINE_KAFKA_MAX_POLL_INTERVAL_MS": "10000"}
    model.queue([ms.text("slow answer", ttft=15)], model="threadline-echo")
    services.stop("processor_worker-1")
    services.start("processor_worker", "processor_worker-1", **env)
    services.start("processor_worker", "processor_worker-c22", **env)
    try:
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            run_id = (await (await tl.stream("x", agent_id="echo-agent", resource_id="res-1",
                                             thread_id=thread)).accepted).run_id
            chunks = await collect_run(sub, timeout_s=60)
            await sub.unsubscribe()
        assert all(services.alive().values())  # no worker exited
        for name in ("processor_worker-1", "processor_worker-c22"):  # both members hold partitions
            deadline = time.monotonic() + 60  # a rebalance on a loaded machine may still be settling
            while True:
                assigned = [ln for ln in (services.log_dir / f"{name}.log").read_text().splitlines()
                            if "partitions assigned" in ln]
                if (assigned and "step-tasks:" in assigned[-1]) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            assert assigned and "step-tasks:" in assigned[-1], assigned
    finally:
        services.stop("processor_worker-c22")
        services.stop("processor_worker-1")
        services.start("processor_worker", "processor_worker-1")
    fig = Figures()
    kept = clean(chunks, fig)[run_id]
    check_stream(run_id, kept, fig)
    assert fig.ok, fig.problems
    assert [c for c in kept if c["type"] == "finish"][0]["payload"]["finishReason"] == "stop"
    assert "".join(c["payload"]["text"] for c in kept if c["type"] == "text-delta") == "slow answer"
    assert fig.discarded_attempts == 0  # no rebalance took the step away: executed once
    assert len(model.requests(model="threadline-echo")) == 1
    stored = await rows(cluster.dsn, "SELECT content FROM messages WHERE run_id = $1 AND role = 'assistant'", run_id)
    assert len(stored) == 1
    assert await wait_idle(cluster.dsn, thread)

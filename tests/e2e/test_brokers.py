"""A replicated Kafka cluster: three KRaft nodes (RF 3, ``min.insync.replicas`` 2), the four
services on it, and agent runs while brokers are killed (-9) and restarted; then the chaos
checker: nothing lost, doubled or stuck.

The cluster is the test's own (:class:`threadline.testing.kafka_cluster.KafkaCluster`: its own
ports from ``THREADLINE_TEST_BROKERS_PORT``, 29092, and a temporary run directory), never the
shared one; PostgreSQL is the session's, with a database of the test's own. Starting three JVMs
beside the services costs about a minute and a half of a 2-core machine's CPU, so the test is
opt-in: ``THREADLINE_TEST_BROKERS=1`` (else skipped; ``make test`` does not pay for it), e.g.

    THREADLINE_TEST_BROKERS=1 .venv/bin/python -m pytest -q -p no:randomly tests/e2e/test_brokers.py

It is marked ``serial``: it kills brokers and loads the machine, so it runs alone.

Each wave of runs meets one fault, 1.5 s after its runs were sent (the first wave none: the
baseline): ``kill -9`` of the leader of a thread's chunk topic, of the leader of the step-task
partition a thread's steps go to, of the active controller, then a rolling restart (SIGTERM and
start, node by node, one per wave). A killed node is started again before the next wave, so two
of three replicas are always in sync.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.partitioner import DefaultPartitioner

from tests.e2e.checker import check_runs
from tests.e2e.faults import Observer, read_all
from tests.e2e.helpers import execute, own_cluster_env, rows
from threadline.client import ThreadlineClient
from threadline.config import Settings
from threadline.kafka.admin import TopicAdmin
from threadline.testing import model_script as ms
from threadline.testing.harness import ServiceSet, create_database, drop_database
from threadline.testing.kafka_cluster import KafkaCluster, partition_leader
from threadline.testing.model_script import ModelScript
from threadline.testing.model_server import RunningServer
from threadline.topics import Topics, thread_key

pytestmark = [
    pytest.mark.serial,
    pytest.mark.skipif(os.environ.get("THREADLINE_TEST_BROKERS") != "1",
                       reason="starts its own three-broker cluster: opt in with THREADLINE_TEST_BROKERS=1"),
]

ROOT = Path(__file__).resolve().parents[2]
RUNS_PER_WAVE = int(os.environ.get("THREADLINE_TEST_BROKERS_RUNS", "8"))
WAIT_S = 240
"""How long the runs may take to end after the last fault."""
ANSWER = "Replicated: every chunk once and in order, and one finish, whichever broker was killed on the way."
RESOURCE = "res-brokers"


@dataclass
class Replicated:
    """The services on the three-broker cluster, and what the test needs to drive and check them."""

    brokers: KafkaCluster
    services: ServiceSet
    settings: Settings
    dsn: str


@dataclass
class Wave:
    """One fault and the runs sent just before it."""

    fault: str
    threads: list[str]
    run_ids: list[str] = field(default_factory=list)
    observer: Observer | None = None
    note: str = ""
    in_flight: int = 0
    """The wave's runs still running when the fault struck."""


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    port = int(os.environ.get("THREADLINE_TEST_BROKERS_PORT", "29092"))
    kafka = KafkaCluster(root=ROOT, run_dir=tmp_path_factory.mktemp("brokers3"), brokers=3, port=port)
    try:
        kafka.start()
        yield kafka
    finally:
        kafka.stop()


@pytest.fixture(scope="module")
def replicated(brokers: KafkaCluster, cluster: Any, model_server: RunningServer,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicated]:
    from threadline.store.migrate import migrate

    tag = uuid.uuid4().hex[:10]
    dbname = f"tl_brokers_{tag}"
    dsn = asyncio.run(create_database(cluster.admin_dsn, dbname))
    migrate(dsn, contract=True)
    settings = Settings(kafka_bootstrap=brokers.bootstrap, pg_dsn=dsn, topic_prefix=f"tlrep-{tag}", partitions=4,
                        replication_factor=3)
    env = own_cluster_env(bootstrap=brokers.bootstrap, dsn=dsn, prefix=settings.topic_prefix, replication_factor=3,
                          api_base=model_server.api_base)
    services = ServiceSet(env=env, log_dir=tmp_path_factory.mktemp("brokers3-logs"), cwd=ROOT)
    try:
        services.start_all()
        services.start("processor_worker", "processor_worker-2")
        yield Replicated(brokers=brokers, services=services, settings=settings, dsn=dsn)
    finally:
        services.stop_all()
        asyncio.run(drop_database(cluster.admin_dsn, dbname))


async def _describe(bootstrap: str, prefix: str) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str | None]]:
    """Every topic of ``prefix`` and the consumer-offsets topic: their partitions (described), and
    the ``min.insync.replicas`` of each topic of ``prefix``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith(prefix) or t == "__consumer_offsets"]
        parts = {d["topic"]: d["partitions"] for d in await admin.describe_topics(names)}
        mine = [t for t in names if t.startswith(prefix)]
        answers = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in mine])
    finally:
        await admin.close()
    min_isr = {}
    for answer in answers:
        for resource in answer.resources:  # (error_code, error_message, type, name, configs)
            configs = {c[0]: c[1] for c in resource[4]}
            min_isr[resource[3]] = configs.get("min.insync.replicas")
    return parts, min_isr


async def test_every_topic_has_three_replicas_and_needs_two_in_sync(replicated: Replicated) -> None:
    prefix = replicated.settings.topic_prefix + "."
    parts, min_isr = await _describe(replicated.brokers.bootstrap, prefix)
    mine = [t for t in parts if t.startswith(prefix)]
    assert len(mine) >= 6, mine  # the internal and ingress topics the services created at start
    assert "__consumer_offsets" in parts  # the services' groups committed offsets
    replicas = {t: {len(p["replicas"]) for p in ps} for t, ps in parts.items()}
    assert replicas == {t: {3} for t in parts}, replicas
    assert min_isr == dict.fromkeys(mine, "2"), min_isr


def _step_partition(thread: str, partitions: int) -> int:
    """The step-task partition of ``thread``'s steps (the producer's partitioner on its thread key)."""
    parts = list(range(partitions))
    return int(DefaultPartitioner()(thread_key(RESOURCE, thread).encode(), parts, parts))


async def _fault(r: Replicated, wave: Wave, topics: Topics) -> None:
    """Inflict ``wave.fault`` (and bring the cluster back to three nodes), blocking work in threads."""
    kafka = r.brokers
    wave.in_flight = len(await rows(r.dsn, "SELECT 1 FROM runs WHERE run_id = ANY($1::text[]) AND status = 'running'",
                                    wave.run_ids))
    if wave.fault == "chunk-leader":
        node = await partition_leader(kafka.bootstrap, topics.chunks(RESOURCE, wave.threads[0]))
    elif wave.fault == "work-leader":
        part = _step_partition(wave.threads[0], r.settings.partitions)
        node = await partition_leader(kafka.bootstrap, topics.step_tasks, part)
    elif wave.fault == "controller":
        node = kafka.active_controller() or 1
    elif wave.fault == "none":  # the baseline: what a wave's runs take with no fault
        await asyncio.sleep(3.0)
        return
    else:  # "restart-N": one step of a rolling restart, a controlled shutdown
        node = int(wave.fault.split("-")[1])
        t0 = time.monotonic()
        await asyncio.to_thread(kafka.stop, node)
        stopped_s = time.monotonic() - t0
        started_s = await asyncio.to_thread(kafka.start, node)
        wave.note = f"node {node} stopped in {stopped_s:.1f} s, back in {started_s:.1f} s more"
        return
    assert node > 0, f"{wave.fault}: no leader to kill"
    await asyncio.to_thread(kafka.kill, node)
    t0 = time.monotonic()
    await asyncio.sleep(3.0)  # runs go on with two of three replicas
    await asyncio.to_thread(kafka.start, node)
    wave.note = f"kill -9 node {node}, back after {time.monotonic() - t0:.1f} s"


async def _send_wave(r: Replicated, model: ModelScript, wave: Wave, topics: Topics) -> None:
    """Script the wave's runs, create their chunk topics (RF 3), watch them and send the runs."""
    for i, th in enumerate(wave.threads):  # step 0 calls the tool, step 1 streams text
        await model.aqueue([ms.tool_calls(ms.tool_call("chaos_effect", {"n": i}), times=10)],
                           model=f"threadline-chaos-{th}-s0")
        await model.aqueue([ms.text(ANSWER, chunk_delay=0.25, times=10)], model=f"threadline-chaos-{th}-s1")
    chunk_topics = [topics.chunks(RESOURCE, th) for th in wave.threads]
    admin = TopicAdmin(r.settings.kafka_bootstrap, replication_factor=3)
    await admin.start()
    try:
        for t in chunk_topics:
            await admin.ensure_one(t, config={"retention.ms": str(r.settings.chunk_retention_ms)})
    finally:
        await admin.stop()
    wave.observer = Observer(r.settings.kafka_bootstrap, chunk_topics)
    await wave.observer.start()
    async with ThreadlineClient(r.settings) as tl:
        sent = await asyncio.gather(*(tl.stream(f"do effect {i}", agent_id="chaos", resource_id=RESOURCE,
                                                thread_id=th) for i, th in enumerate(wave.threads)))
        accepted = [await s.accepted for s in sent]
    wave.run_ids = [str(a.run_id) for a in accepted if a.run_id]
    assert len(wave.run_ids) == len(wave.threads), accepted


_NOT_DONE = """
SELECT r.run_id, r.status, r.step, r.attempt FROM runs r LEFT JOIN thread_leases l ON l.thread_id = r.thread_id
WHERE r.run_id = ANY($1::text[]) AND (r.status = 'running' OR l.run_id = r.run_id) ORDER BY r.run_id
"""


_TOOK = """
SELECT extract(epoch FROM finished_at - created_at)::float8 AS s FROM runs WHERE run_id = ANY($1::text[])
"""


async def _wait_done(dsn: str, run_ids: list[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while stuck := await rows(dsn, _NOT_DONE, run_ids):
        if time.monotonic() > deadline:
            pytest.fail(f"{len(stuck)}/{len(run_ids)} runs not done:\n" + "\n".join(map(str, map(dict, stuck))),
                        pytrace=False)
        await asyncio.sleep(0.5)


@pytest.mark.timeout(1200)
async def test_runs_survive_leader_controller_kills_and_a_rolling_restart(replicated: Replicated,
                                                                          model: ModelScript) -> None:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the kills are expected
    r = replicated
    await execute(r.dsn, "CREATE TABLE IF NOT EXISTS chaos_effects (run_id text, tool_call_id text, "
                         "idempotency_key text, pid integer, at timestamptz DEFAULT now())")
    topics = Topics(r.settings.topic_prefix)
    tag = uuid.uuid4().hex[:6]
    faults = ["none", "chunk-leader", "work-leader", "controller", *(f"restart-{n}" for n in r.brokers.nodes)]
    waves = [Wave(f, [f"th-brk-{tag}-{w}-{i}" for i in range(RUNS_PER_WAVE)]) for w, f in enumerate(faults)]
    t0 = time.monotonic()
    try:
        for wave in waves:
            await _send_wave(r, model, wave, topics)
            await asyncio.sleep(1.5)  # the runs are mid-step: tool calls and streamed text
            await _fault(r, wave, topics)
            print(f"  {time.monotonic() - t0:6.1f}s {wave.fault} ({wave.in_flight} of the wave's runs running): {wave.note}")
        run_ids = [rid for wave in waves for rid in wave.run_ids]
        await _wait_done(r.dsn, run_ids)
        print(f"  {time.monotonic() - t0:6.1f}s all {len(run_ids)} runs done")
        await asyncio.sleep(1.0)  # the live observers catch up with the last chunks
        chunk_topics = [topics.chunks(RESOURCE, th) for wave in waves for th in wave.threads]
        replay = await read_all(r.settings.kafka_bootstrap, chunk_topics)
        lifecycle = await read_all(r.settings.kafka_bootstrap, [topics.lifecycle], partitions=r.settings.partitions)
    finally:
        for wave in waves:
            if wave.observer is not None:
                await wave.observer.stop()
    runs = {row["run_id"]: row for row in await rows(r.dsn, "SELECT * FROM runs WHERE run_id = ANY($1::text[])", run_ids)}
    stored: dict[str, list[Any]] = {}
    for m in await rows(r.dsn, "SELECT run_id, role FROM messages WHERE run_id = ANY($1::text[]) ORDER BY position",
                        run_ids):
        stored.setdefault(m["run_id"], []).append(m)
    effects = await rows(r.dsn, "SELECT run_id, tool_call_id, pid FROM chaos_effects WHERE run_id = ANY($1::text[])",
                         run_ids)
    live = [c for wave in waves if wave.observer is not None for c in wave.observer.chunks]
    fig = check_runs(observed=[live, replay], run_ids=run_ids, runs=runs, messages=stored, lifecycle=lifecycle,
                     effects=effects, killed_pids=set())
    recoveries = await rows(r.dsn, "SELECT run_id, step, reason FROM run_recoveries WHERE run_id = ANY($1::text[])",
                            run_ids)
    twice = Counter((c.get("runId"), c.get("seq")) for c in replay)
    repeated = sorted({(c.get("type"), c.get("runId"), c.get("seq")) for c in replay
                       if twice[(c.get("runId"), c.get("seq"))] > 1}, key=str)
    print(f"  figures: {fig.as_dict()}; sweeper recoveries: {len(recoveries)}; on a topic twice: {repeated}")
    for wave in waves:  # what each fault cost the runs it struck
        took = [row["s"] for row in await rows(r.dsn, _TOOK, wave.run_ids)]
        print(f"  {wave.fault:13s} runs took {min(took):5.1f}-{max(took):5.1f} s (median {sorted(took)[len(took) // 2]:.1f})")
    assert fig.ok, fig.problems[:20]
    assert all(wave.in_flight for wave in waves), [(w.fault, w.in_flight) for w in waves]  # every fault struck mid-run
    assert fig.chunks_checked > len(run_ids) * 10
    assert len(run_ids) == len(faults) * RUNS_PER_WAVE

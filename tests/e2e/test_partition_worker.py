"""A processor-worker cut off mid-step from Kafka and PostgreSQL past its lease, then rejoined:
another worker takes the step over from the stored tool result, the cut
worker's late step-result write is fenced, the tool's side effect ran once, and the chaos
checker finds nothing lost, doubled or stuck. Then the same for a run-orchestrator cut under
runs (a second one on the host).

One worker runs in a network namespace (``threadline.testing.netns``), the other services and a
second worker on the host. The broker is the test's own (one node on the peer address ``kafka``,
port ``THREADLINE_TEST_PARTITIONS_PORT`` + 100, 29292); PostgreSQL is the shared one with a
database of the test's own, which the namespace reaches through a forwarder (so does the fake
model server). The namespaced worker holds each run 3 s after its tool's result is stored
(pause point ``after_tool_result_stored``); at the first hold the namespace is cut from Kafka and
PostgreSQL for :data:`CUT_S` seconds, past the thread lease (``lease_ttl_s``, 30 s). Needs root
and a JVM: opt in with ``THREADLINE_TEST_PARTITIONS=1``, e.g.

    THREADLINE_TEST_PARTITIONS=1 .venv/bin/python -m pytest -q -p no:randomly tests/e2e/test_partition_worker.py
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka.partitioner import DefaultPartitioner

from tests.e2e.checker import check_runs
from tests.e2e.faults import Observer, read_all
from tests.e2e.helpers import execute, own_cluster_env, rows
from tests.e2e.partitions import OPT_IN, ROOT, own_broker
from threadline.client import ThreadlineClient
from threadline.config import Settings
from threadline.kafka.admin import TopicAdmin
from threadline.testing import model_script as ms
from threadline.testing.harness import ServiceSet, create_database, drop_database, wait_file
from threadline.testing.kafka_cluster import KafkaCluster
from threadline.testing.model_script import ModelScript
from threadline.testing.model_server import RunningServer
from threadline.testing.netns import Namespace, Network
from threadline.topics import Topics, thread_key

pytestmark = OPT_IN

RUNS = int(os.environ.get("THREADLINE_TEST_PARTITIONS_RUNS", "6"))
CUT_S = 40.0
"""How long the worker is cut off: past the thread lease (30 s)."""
WAIT_S = 240
ANSWER = "Partitioned: the step was taken over, its tool ran once, and the late write was fenced."
RESOURCE = "res-netns"
CUT_WORKER = "processor_worker-ns"


@dataclass
class Partitioned:
    network: Network
    ns: Namespace
    services: ServiceSet
    settings: Settings
    dsn: str
    logs: Path
    cut_env: dict[str, str]
    """The cut worker's addresses of PostgreSQL and the model server (their forwarders)."""


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    with Network(peers=("kafka", "postgres", "model")) as net:
        yield net


@pytest.fixture(scope="module")
def broker(network: Network, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with own_broker(network, tmp_path_factory.mktemp("netns-kafka"), port_offset=100) as kafka:
        yield kafka


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


@pytest.fixture(scope="module")
def partitioned(network: Network, broker: KafkaCluster, cluster: Any, model_server: RunningServer,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Partitioned]:
    from threadline.store.migrate import migrate

    tag = uuid.uuid4().hex[:10]
    dbname = f"tl_netns_{tag}"
    dsn = asyncio.run(create_database(cluster.admin_dsn, dbname))
    migrate(dsn, contract=True)
    pg_port = network.forward("postgres", _port(cluster.admin_dsn))
    ns_dsn = dsn.replace(f"127.0.0.1:{_port(cluster.admin_dsn)}", f"{network.address('postgres')}:{pg_port}")
    model_port = network.forward("model", model_server.port)
    settings = Settings(kafka_bootstrap=broker.bootstrap, pg_dsn=dsn, topic_prefix=f"tlns-{tag}", partitions=4,
                        replication_factor=1)
    env = own_cluster_env(bootstrap=broker.bootstrap, dsn=dsn, prefix=settings.topic_prefix, replication_factor=1,
                          api_base=model_server.api_base)
    logs = tmp_path_factory.mktemp("netns-logs")
    ns = network.namespace("tlwork")
    services = ServiceSet(env=env, log_dir=logs, cwd=ROOT, netns={CUT_WORKER: ns.command([])})
    try:
        services.start_all()
        yield Partitioned(network=network, ns=ns, services=services, settings=settings, dsn=dsn, logs=logs,
                          cut_env={"THREADLINE_PG_DSN": ns_dsn, "THREADLINE_MODEL_API_BASE":
                                   f"http://{network.address('model')}:{model_port}/v1"})
    finally:
        services.stop_all()
        asyncio.run(drop_database(cluster.admin_dsn, dbname))


async def _send(p: Partitioned, model: ModelScript, threads: list[str], topics: Topics) -> tuple[list[str], Observer]:
    for i, th in enumerate(threads):  # step 0 calls the tool, step 1 streams text
        await model.aqueue([ms.tool_calls(ms.tool_call("chaos_effect", {"n": i}), times=10)],
                           model=f"threadline-chaos-{th}-s0")
        await model.aqueue([ms.text(ANSWER, chunk_delay=0.1, times=10)], model=f"threadline-chaos-{th}-s1")
    chunk_topics = [topics.chunks(RESOURCE, th) for th in threads]
    admin = TopicAdmin(p.settings.kafka_bootstrap, replication_factor=1)
    await admin.start()
    try:
        for t in chunk_topics:
            await admin.ensure_one(t, config={"retention.ms": str(p.settings.chunk_retention_ms)})
    finally:
        await admin.stop()
    observer = Observer(p.settings.kafka_bootstrap, chunk_topics)
    await observer.start()
    async with ThreadlineClient(p.settings) as tl:
        sent = await asyncio.gather(*(tl.stream(f"do effect {i}", agent_id="chaos", resource_id=RESOURCE,
                                                thread_id=th) for i, th in enumerate(threads)))
        accepted = [await s.accepted for s in sent]
    run_ids = [str(a.run_id) for a in accepted if a.run_id]
    assert len(run_ids) == len(threads), accepted
    return run_ids, observer


_NOT_DONE = """
SELECT r.run_id, r.status, r.step, r.attempt FROM runs r LEFT JOIN thread_leases l ON l.thread_id = r.thread_id
WHERE r.run_id = ANY($1::text[]) AND (r.status = 'running' OR l.run_id = r.run_id) ORDER BY r.run_id
"""


LATE_ENDS = {30: "stale or duplicate step task skipped", 60: "stale writer: step result discarded"}
"""How the cut worker's step ends once it is back, by its Kafka acknowledgement timeout
(``kafka_ack_timeout_s``): 30 s (the default, shorter than the cut) ends its attempt during the
cut, and the retried step task is found taken over and skipped; 60 s keeps the attempt waiting
through the cut, so its chunks are acknowledged late and its step-result write is fenced by the
lease epoch."""


async def _checked(p: Partitioned, observer: Observer, threads: list[str], run_ids: list[str],
                   topics: Topics) -> tuple[Any, list[Any]]:
    """The chaos checker's figures over the live reader's chunks and a replay of the threads'
    topics, with the tool side effects recorded (``(figures, effects)``)."""
    chunk_topics = [topics.chunks(RESOURCE, th) for th in threads]
    replay = await read_all(p.settings.kafka_bootstrap, chunk_topics)
    lifecycle = await read_all(p.settings.kafka_bootstrap, [topics.lifecycle], partitions=p.settings.partitions)
    runs = {r["run_id"]: r for r in await rows(p.dsn, "SELECT * FROM runs WHERE run_id = ANY($1::text[])", run_ids)}
    stored: dict[str, list[Any]] = {}
    for m in await rows(p.dsn, "SELECT run_id, role FROM messages WHERE run_id = ANY($1::text[]) ORDER BY position",
                        run_ids):
        stored.setdefault(m["run_id"], []).append(m)
    effects = await rows(p.dsn, "SELECT run_id, tool_call_id, pid FROM chaos_effects WHERE run_id = ANY($1::text[])",
                         run_ids)
    fig = check_runs(observed=[observer.chunks, replay], run_ids=run_ids, runs=runs, messages=stored,
                     lifecycle=lifecycle, effects=effects, killed_pids=set())
    return fig, effects


async def _wait_done(dsn: str, run_ids: list[str]) -> float:
    t0 = time.monotonic()
    while stuck := await rows(dsn, _NOT_DONE, run_ids):
        if time.monotonic() - t0 > WAIT_S:
            pytest.fail(f"{len(stuck)}/{len(run_ids)} runs not done:\n" + "\n".join(map(str, map(dict, stuck))),
                        pytrace=False)
        await asyncio.sleep(0.5)
    return time.monotonic() - t0


@pytest.mark.timeout(900)
@pytest.mark.parametrize("ack_timeout_s", sorted(LATE_ENDS))
async def test_a_worker_cut_off_past_its_lease_is_taken_over_and_fenced(partitioned: Partitioned, model: ModelScript,
                                                                        ack_timeout_s: int) -> None:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    p = partitioned
    pause_file = p.logs / f"paused-{ack_timeout_s}"
    if CUT_WORKER in p.services.procs:  # left by a failed case before
        await asyncio.to_thread(p.services.stop, CUT_WORKER)
    await asyncio.to_thread(p.services.start, "processor_worker", CUT_WORKER, None, **p.cut_env,
                            THREADLINE_KAFKA_ACK_TIMEOUT_S=str(ack_timeout_s),
                            THREADLINE_PAUSE_POINTS="after_tool_result_stored", THREADLINE_PAUSE_FILE=str(pause_file),
                            THREADLINE_PAUSE_SECONDS="3")
    await execute(p.dsn, "CREATE TABLE IF NOT EXISTS chaos_effects (run_id text, tool_call_id text, "
                         "idempotency_key text, pid integer, at timestamptz DEFAULT now())")
    await asyncio.sleep(5)  # both workers' consumers have joined the group and own partitions
    topics = Topics(p.settings.topic_prefix)
    threads = [f"th-ns-{uuid.uuid4().hex[:6]}-{i}" for i in range(RUNS)]
    run_ids, observer = await _send(p, model, threads, topics)
    try:
        await asyncio.to_thread(wait_file, pause_file, "after_tool_result_stored", 90)
        await asyncio.sleep(0.5)  # the cut worker's other runs reach the hold too
        held = len((await asyncio.to_thread(pause_file.read_text)).split())
        p.ns.cut("kafka", "postgres")
        done = asyncio.create_task(_wait_done(p.dsn, run_ids))  # seconds from the cut until all are done
        await asyncio.sleep(CUT_S)
        cut = p.ns.rejoin()
        took = await done
        print(f"  {held} runs held in the cut worker; cut {max(cut.values()):.1f} s; all runs done {took:.1f} s "
              "after the cut")
        await asyncio.to_thread(p.services.wait_log, CUT_WORKER, LATE_ENDS[ack_timeout_s], 120)
        await asyncio.sleep(1.0)
    finally:
        await observer.stop()
    fig, effects = await _checked(p, observer, threads, run_ids, topics)
    cut_pid = p.services.pid(CUT_WORKER)
    await asyncio.to_thread(p.services.stop, CUT_WORKER)
    in_cut = {r["run_id"] for r in effects if r["pid"] == cut_pid}
    recoveries = await rows(p.dsn, "SELECT run_id, step, reason FROM run_recoveries WHERE run_id = ANY($1::text[])",
                            run_ids)
    print(f"  tool run in the cut worker for {len(in_cut)} runs; it ended with {LATE_ENDS[ack_timeout_s]!r}; "
          f"figures {fig.as_dict()}; sweeper recoveries {len(recoveries)}")
    assert fig.ok, fig.problems[:20]
    assert in_cut and held >= 1  # the cut struck runs mid-step, after their tool ran
    assert fig.tool_executions == fig.tool_calls == len(run_ids)  # each tool ran once: none re-run at takeover
    assert took < CUT_S  # taken over while the worker was still cut off: nothing waited for it
    assert not recoveries  # the takeover was the workers' own, not the sweeper's


CUT_ORCHESTRATOR = "run_orchestrator-ns"


def _assigned(log: str, topic: str) -> set[int]:
    """The partitions of ``topic`` in the last ``partitions assigned`` line of a service's ``log``."""
    lines = [line for line in log.splitlines() if "partitions assigned" in line]
    return {int(m) for m in re.findall(re.escape(topic) + r":(\d+)", lines[-1])} if lines else set()


@pytest.mark.timeout(900)
async def test_an_orchestrator_cut_off_past_its_lease_is_taken_over(partitioned: Partitioned,
                                                                    model: ModelScript) -> None:
    """A run-orchestrator in the namespace, cut from Kafka and PostgreSQL 1.5 s after the runs are
    sent, for :data:`CUT_S`: the host's orchestrator gets its partitions; nothing lost, doubled or stuck."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    p = partitioned
    await execute(p.dsn, "CREATE TABLE IF NOT EXISTS chaos_effects (run_id text, tool_call_id text, "
                         "idempotency_key text, pid integer, at timestamptz DEFAULT now())")
    p.services.netns[CUT_ORCHESTRATOR] = p.ns.command([])
    await asyncio.to_thread(p.services.start, "run_orchestrator", CUT_ORCHESTRATOR, None,
                            THREADLINE_PG_DSN=p.cut_env["THREADLINE_PG_DSN"])
    await asyncio.sleep(5)  # both orchestrators own partitions
    topics = Topics(p.settings.topic_prefix)
    threads = [f"th-nso-{uuid.uuid4().hex[:6]}-{i}" for i in range(RUNS)]
    run_ids, observer = await _send(p, model, threads, topics)
    try:
        await asyncio.sleep(1.5)
        owned = _assigned(p.services.log_path(CUT_ORCHESTRATOR).read_text(errors="replace"), topics.step_results)
        p.ns.cut("kafka", "postgres")
        done = asyncio.create_task(_wait_done(p.dsn, run_ids))
        await asyncio.sleep(CUT_S)
        p.ns.rejoin()
        took = await done
        await asyncio.sleep(1.0)
    finally:
        await observer.stop()
    fig, _ = await _checked(p, observer, threads, run_ids, topics)
    parts = list(range(p.settings.partitions))
    touched = [th for th in threads
               if DefaultPartitioner()(thread_key(RESOURCE, th).encode(), parts, parts) in owned]
    await asyncio.to_thread(p.services.stop, CUT_ORCHESTRATOR)
    recoveries = await rows(p.dsn, "SELECT run_id, step, reason FROM run_recoveries WHERE run_id = ANY($1::text[])",
                            run_ids)
    print(f"  runs done {took:.1f} s after the cut; {len(touched)} on the cut orchestrator's partitions {owned}; "
          f"figures {fig.as_dict()}; sweeper recoveries {len(recoveries)}")
    assert fig.ok, fig.problems[:20]
    assert touched  # the cut struck runs whose step results the cut orchestrator was to apply

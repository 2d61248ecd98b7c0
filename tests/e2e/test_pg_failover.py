"""PostgreSQL failovers in the middle of agent runs: nothing lost, doubled or stuck (decision 209).

The services run against a primary with a synchronous standby of this module's own
(:class:`threadline.testing.pg_standby.StandbyPair`: two free ports, its own data; never the shared
cluster's PostgreSQL) through the multi-host DSN (``target_session_attrs=read-write``), and the
session's Kafka under a topic prefix of their own. A first batch of runs measures how long a batch
takes here; then a second batch starts and, while its runs are in their tool step or streaming
text, the primary is stopped and the standby promoted (``deploy/native/postgres.sh promote``);
then the former primary rejoins as the standby and a third batch meets a failover back to it.
No service is restarted. Then the chaos checker (:func:`tests.e2e.checker.check_runs`) over all
three batches: every run terminal with one ``finish``, no chunk lost, doubled or out of order,
every tool call executed once, and none needed the sweeper. The figures it prints are those of
docs/reliability.md ("A PostgreSQL failover").
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.checker import Figures, check_runs
from tests.e2e.faults import Observer, read_all
from tests.e2e.helpers import execute, rows
from tests.e2e.test_chaos import _STUCK, ANSWER, stuck_report
from threadline.client import ThreadlineClient
from threadline.config import Settings
from threadline.kafka.admin import TopicAdmin
from threadline.store.migrate import migrate
from threadline.testing import model_script as ms
from threadline.testing.harness import ServiceSet
from threadline.testing.pg_standby import StandbyPair, free_port_pair
from threadline.topics import Topics

ROOT = Path(__file__).resolve().parents[2]
RUNS = 24
"""Runs per batch."""
FAILOVER_AT_S = 1.5
"""Seconds after the second batch is accepted: its runs are in their tool step or streaming."""
DONE_WITHIN_S = 60.0
"""How long after the promotion every run must be terminal: far less than the sweeper's 90 s,
so a run that needed it fails the test."""


@dataclass
class PairCluster:
    pair: StandbyPair
    settings: Settings
    services: ServiceSet


@pytest.fixture(scope="module")
def pair_cluster(cluster, services, tmp_path_factory) -> Iterator[PairCluster]:
    pair = StandbyPair(root=ROOT, run_dir=tmp_path_factory.mktemp("pg-pair"), port=free_port_pair())
    why = pair.unavailable()
    if why:
        pytest.skip(f"no PostgreSQL pair here: {why}")
    own: ServiceSet | None = None
    try:
        pair.start()
        migrate(pair.dsn(), contract=True)
        prefix = f"tlpgfo-{uuid.uuid4().hex[:8]}"
        env = {**services.env, "THREADLINE_PG_DSN": pair.dsn(), "THREADLINE_TOPIC_PREFIX": prefix}
        own = ServiceSet(env=env, log_dir=tmp_path_factory.mktemp("pg-failover-logs"), cwd=ROOT)
        own.start_all()
        own.start("processor_worker", "processor_worker-2")
        yield PairCluster(pair, Settings(kafka_bootstrap=cluster.bootstrap, pg_dsn=pair.dsn(), topic_prefix=prefix,
                                         partitions=4), own)
    finally:
        if own is not None:
            own.stop_all()
        pair.destroy()


async def _queue_models(model, threads: list[str]) -> None:
    for i, th in enumerate(threads):  # step 0 calls the counted tool, step 1 streams text
        await model.aqueue([ms.tool_calls(ms.tool_call("chaos_effect", {"n": i}), times=10)],
                           model=f"threadline-chaos-{th}-s0")
        await model.aqueue([ms.text(ANSWER, chunk_delay=0.03, times=10)], model=f"threadline-chaos-{th}-s1")


async def _start(settings: Settings, threads: list[str]) -> list[str]:
    async with ThreadlineClient(settings) as tl:
        sent = await asyncio.gather(*(tl.stream(f"do effect {i}", agent_id="chaos", resource_id="res-pgfo",
                                                thread_id=th) for i, th in enumerate(threads)))
        return [(await s.accepted).run_id for s in sent]


async def _until_terminal(dsn: str, run_ids: list[str], within_s: float) -> float:
    """Seconds until no run of ``run_ids`` is running; fails the test after ``within_s``."""
    t0 = time.monotonic()
    while True:
        try:
            stuck = await rows(dsn, _STUCK, run_ids)
        except OSError:  # (the test's own reads meet the failover too)
            stuck = [None]
        if not stuck:
            return time.monotonic() - t0
        if time.monotonic() - t0 > within_s:
            detail = stuck_report(stuck) if stuck[0] is not None else "PostgreSQL unreachable"
            pytest.fail(f"{len(stuck)}/{len(run_ids)} runs not done {within_s:.0f} s on:\n{detail}", pytrace=False)
        await asyncio.sleep(0.25)


@dataclass
class Batch:
    """One batch of runs, and what its failover (if any) cost."""

    run_ids: list[str]
    seconds: float
    """From sending the batch until every run of it was terminal."""
    in_flight: int = 0
    """Runs still running when the failover began."""
    promote_s: float = 0.0
    after_s: float = 0.0
    """From the failover's start until every run was terminal."""


async def _batch(pair: StandbyPair, settings: Settings, threads: list[str], *, fail_over: bool) -> Batch:
    dsn = pair.dsn()
    t0 = time.monotonic()
    run_ids = await _start(settings, threads)
    if not fail_over:
        await _until_terminal(dsn, run_ids, DONE_WITHIN_S)
        return Batch(run_ids, time.monotonic() - t0)
    await asyncio.sleep(max(0.0, FAILOVER_AT_S - (time.monotonic() - t0)))
    in_flight = len(await rows(dsn, "SELECT 1 FROM runs WHERE run_id = ANY($1::text[]) AND status = 'running'",
                               run_ids))
    before = pair.primary_port()
    t_failover = time.monotonic()
    promote_s = await asyncio.to_thread(pair.promote)
    await _until_terminal(dsn, run_ids, DONE_WITHIN_S)
    done = time.monotonic()
    assert pair.primary_port() != before
    assert in_flight > 0, "the failover came after the runs: it tested nothing"
    return Batch(run_ids, done - t0, in_flight, promote_s, done - t_failover)


async def _check(dsn: str, run_ids: list[str], observed: list[list[dict]],
                 lifecycle: list[dict]) -> tuple[Figures, list[dict]]:
    """The chaos checker over ``run_ids``; returns its figures and the sweeper's recoveries."""
    runs = {r["run_id"]: r for r in await rows(dsn, "SELECT * FROM runs WHERE run_id = ANY($1::text[])", run_ids)}
    stored: dict[str, list] = {}
    for m in await rows(dsn, "SELECT run_id, role FROM messages WHERE run_id = ANY($1::text[]) ORDER BY position",
                        run_ids):
        stored.setdefault(m["run_id"], []).append(m)
    effects = await rows(dsn, "SELECT run_id, tool_call_id, pid FROM chaos_effects WHERE run_id = ANY($1::text[])",
                         run_ids)
    recoveries = await rows(dsn, "SELECT run_id, step, action, reason FROM run_recoveries "
                                 "WHERE run_id = ANY($1::text[])", run_ids)
    fig = check_runs(observed=observed, run_ids=run_ids, runs=runs, messages=stored, lifecycle=lifecycle,
                     effects=effects, killed_pids=set())
    return fig, [dict(r) for r in recoveries]


@pytest.mark.timeout(480)
async def test_runs_carry_on_through_two_failovers(pair_cluster: PairCluster, model) -> None:
    """A batch without a failover, one with, then (the former primary rejoined as the standby)
    one more with a failover back to the first server; the checker over all three."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    pair, settings = pair_cluster.pair, pair_cluster.settings
    dsn = pair.dsn()
    await execute(dsn, "CREATE TABLE IF NOT EXISTS chaos_effects (run_id text, tool_call_id text, "
                       "idempotency_key text, pid integer, at timestamptz DEFAULT now())")
    tag = uuid.uuid4().hex[:6]
    threads = [[f"th-pgfo-{tag}-{b}{i}" for i in range(RUNS)] for b in "abc"]
    await _queue_models(model, [th for batch in threads for th in batch])
    topics = Topics(settings.topic_prefix)
    chunk_topics = [topics.chunks("res-pgfo", th) for batch in threads for th in batch]
    admin = TopicAdmin(settings.kafka_bootstrap)
    await admin.start()
    try:  # one request for all (the observer reads partition 0 of each from the start)
        await admin.ensure(chunk_topics, config={"retention.ms": str(settings.chunk_retention_ms)})
    finally:
        await admin.stop()
    live = Observer(settings.kafka_bootstrap, chunk_topics)
    await live.start()
    try:
        baseline = await _batch(pair, settings, threads[0], fail_over=False)
        first = await _batch(pair, settings, threads[1], fail_over=True)
        await asyncio.to_thread(pair.rejoin)
        second = await _batch(pair, settings, threads[2], fail_over=True)
        await asyncio.sleep(1.0)  # the live observer catches up with the last chunks
        replay = await read_all(settings.kafka_bootstrap, chunk_topics)
        lifecycle = await read_all(settings.kafka_bootstrap, [topics.lifecycle], partitions=settings.partitions)
    finally:
        await live.stop()
    run_ids = baseline.run_ids + first.run_ids + second.run_ids
    fig, recoveries = await _check(dsn, run_ids, [live.chunks, replay], lifecycle)
    for n, b in enumerate((first, second), 1):
        print(f"\nPostgreSQL failover {n}: {RUNS} runs ({b.in_flight} in flight), promote {b.promote_s:.1f} s, all "
              f"terminal {b.after_s:.1f} s after the failover began; the batch took {b.seconds:.1f} s against "
              f"{baseline.seconds:.1f} s without one")
    print(f"{fig.chunks_checked} chunks checked, {fig.duplicates_dropped} redelivered duplicates dropped, "
          f"{fig.discarded_attempts} attempts discarded, {fig.tool_executions} tool executions, "
          f"{len(recoveries)} sweeper recoveries")
    assert fig.ok, fig.problems[:20]
    assert recoveries == []  # the services recovered by themselves, not the sweeper
    assert fig.chunks_checked > len(run_ids) * 20

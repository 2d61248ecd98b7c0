"""The shared chunk layout end to end (``THREADLINE_CHUNK_LAYOUT=shared``; docs/decisions.md#shared-chunk-layout).

Every service, the gateway and the client of this module run in the shared layout (the
``chunk_layout`` fixture, ``CHUNK_LAYOUTS``). Here: no thread gets a topic of its own; two threads
on one partition never see each other's chunks, live or replayed; the CLI reads its thread. And
the key stream, resume and replay tests of other modules run again here, in the shared layout
(their modules run them in the per-thread layout): B16's new-thread subscriber, C20's late join,
reconnect from an offset with a cursor, and replay (the fan-out reader), abort and
``active_run_id``, the re-executed step whose dead attempt is filtered, ``hide_signals`` and the
synthetic runs of signals, notifications the scheduler delivers (a wake, a digest), a sub-agent's
chunks mirrored to its parent's thread, and the gateway's SSE resume by ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.e2e.test_abort import (
    test_abort_on_an_idle_thread_aborts_nothing,
    test_c04_abort_ends_the_run_with_abort_not_a_tripwire,
    test_c18_follow_ups_survive_the_abort_of_the_active_run_in_order,
)
from tests.e2e.test_b16_new_thread_subscriber import test_b16a_client_subscriber_sees_the_first_chunk_of_a_new_thread
from tests.e2e.test_fanout import test_c20_attach_late_join_reconnect_and_replay
from tests.e2e.test_gateway import (
    test_a_dropped_stream_resumes_after_its_last_event_id,
    test_the_stream_says_when_it_is_subscribed,
)
from tests.e2e.test_notifications import (
    test_n6_low_on_idle_thread_is_a_digest_for_subscribers_only,
    test_urgent_on_idle_thread_wakes_a_run,
)
from tests.e2e.test_replay import test_a_re_executed_step_replays_the_model_output_and_the_tool_runs_once
from tests.e2e.test_signals import (
    test_idle_persist_stores_without_a_model_call_and_shows_a_synthetic_run,
    test_queued_messages_run_in_order_one_run_each,
    test_s35_hide_signals_per_subscriber,
)
from tests.e2e.test_sub_agents import test_a_sub_agent_call_is_a_child_run_and_resumes_its_parent
from threadline.client import ThreadlineClient
from threadline.kafka.layout import chunk_place
from threadline.topics import Topics

CHUNK_LAYOUTS = ("shared",)
pytestmark = pytest.mark.usefixtures("chunk_layout")

REUSED = (test_abort_on_an_idle_thread_aborts_nothing, test_c04_abort_ends_the_run_with_abort_not_a_tripwire,
          test_c18_follow_ups_survive_the_abort_of_the_active_run_in_order,
          test_b16a_client_subscriber_sees_the_first_chunk_of_a_new_thread,
          test_c20_attach_late_join_reconnect_and_replay, test_a_dropped_stream_resumes_after_its_last_event_id,
          test_the_stream_says_when_it_is_subscribed,
          test_a_re_executed_step_replays_the_model_output_and_the_tool_runs_once,
          test_idle_persist_stores_without_a_model_call_and_shows_a_synthetic_run,
          test_queued_messages_run_in_order_one_run_each, test_s35_hide_signals_per_subscriber,
          test_urgent_on_idle_thread_wakes_a_run, test_n6_low_on_idle_thread_is_a_digest_for_subscribers_only,
          test_a_sub_agent_call_is_a_child_run_and_resumes_its_parent)
"""Collected again in this module (so in the shared layout); named so no linter takes the imports for unused."""

ROOT = Path(__file__).resolve().parents[2]
RES = "res-shared"


async def _topics(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def _partitions(bootstrap: str, topic: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return len((await admin.describe_topics([topic]))[0]["partitions"])
    finally:
        await admin.close()


def _neighbours(settings: Any, n: int) -> list[str]:
    """``n`` new thread ids whose chunks share one partition of the shared topic."""
    topics, found, want = Topics.of(settings), [], None
    while len(found) < n:
        thread = f"th-sh-{uuid.uuid4().hex[:8]}"
        partition = chunk_place(topics, settings.chunk_partitions, RES, thread).partition
        want = partition if want is None else want
        if partition == want:
            found.append(thread)
    return found


async def _until_finishes(sub: Any, runs: int, timeout_s: float = 60) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    async def pump() -> None:
        finished = 0
        async for chunk in sub.stream:
            out.append(chunk)
            finished += chunk["type"] == "finish"
            if finished == runs:
                return

    await asyncio.wait_for(pump(), timeout_s)
    return out


async def test_threads_get_no_topic_of_their_own_and_share_the_partitioned_topic(services, settings, cluster, model):
    topics = Topics.of(settings)
    assert topics.shared_layout
    before = {t for t in await _topics(cluster.bootstrap) if t.startswith(f"{cluster.prefix}.chunks.")}
    threads = [f"th-sh-{uuid.uuid4().hex[:8]}" for _ in range(12)]
    async with ThreadlineClient(settings) as tl:
        subs = await asyncio.gather(*(tl.subscribe_to_thread(RES, t) for t in threads))
        await asyncio.gather(*(tl.send_message("hi", agent_id="B16", resource_id=RES, thread_id=t) for t in threads))
        runs = await asyncio.gather(*(_until_finishes(s, 1) for s in subs))
        for sub in subs:
            await sub.unsubscribe()
    for thread, sub, chunks in zip(threads, subs, runs, strict=True):
        assert sub.topic == topics.shared_chunks
        assert sub.partition == chunk_place(topics, settings.chunk_partitions, RES, thread).partition
        assert [c["seq"] for c in chunks] == list(range(len(chunks))) and chunks[-1]["type"] == "finish"
    after = {t for t in await _topics(cluster.bootstrap) if t.startswith(f"{cluster.prefix}.chunks.")}
    assert after == before  # not one per-thread topic made, by a writer or a subscriber
    assert not {topics.thread_chunks(RES, t) for t in threads} & after
    assert await _partitions(cluster.bootstrap, topics.shared_chunks) == settings.chunk_partitions


async def test_threads_on_one_partition_never_see_each_others_chunks(services, settings, model):
    model.queue([{"chunks": [f"a{i} " for i in range(40)], "chunk_delay": 0.005}], model="threadline-fanout")
    model.queue([{"chunks": [f"b{i} " for i in range(40)], "chunk_delay": 0.005}], model="threadline-fanout")
    one, two = _neighbours(settings, 2)
    async with ThreadlineClient(settings) as tl:
        live = [await tl.subscribe_to_thread(RES, t) for t in (one, two)]
        accepted = await asyncio.gather(*(tl.send_message("go", agent_id="fanout", resource_id=RES, thread_id=t)
                                          for t in (one, two)))
        run_ids = [(await a.accepted).run_id for a in accepted]
        got = await asyncio.gather(*(_until_finishes(s, 1) for s in live))
        replayed = [await tl.subscribe_to_thread(RES, t, from_beginning=True) for t in (one, two)]
        again = await asyncio.gather(*(_until_finishes(s, 1) for s in replayed))
        for sub in (*live, *replayed):
            await sub.unsubscribe()
    assert live[0].partition == live[1].partition is not None
    for run_id, chunks, replay in zip(run_ids, got, again, strict=True):
        assert {c["runId"] for c in chunks} == {run_id} == {c["runId"] for c in replay}
        assert [c["seq"] for c in replay] == [c["seq"] for c in chunks] == list(range(len(chunks)))
    texts = ["".join(c["payload"]["text"] for c in chunks if c["type"] == "text-delta") for chunks in got]
    assert sorted(t[:2] for t in texts) == ["a0", "b0"] and all(len(t.split()) == 40 for t in texts)


def _cli_subscriber(thread: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "threadline.cli", "subscribe", "-r", RES, "-t", thread,
                             "--until-finish", "--timeout", "120"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


async def test_the_cli_prints_its_threads_chunks_only(services, settings, cluster):
    one, two = _neighbours(settings, 2)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "THREADLINE_KAFKA_BOOTSTRAP": cluster.bootstrap,
           "THREADLINE_PG_DSN": cluster.dsn, "THREADLINE_TOPIC_PREFIX": cluster.prefix, "THREADLINE_PARTITIONS": "4"}
    assert env["THREADLINE_CHUNK_LAYOUT"] == "shared"  # the fixture's, as every service's
    cli = _cli_subscriber(one, env)
    try:
        assert cli.stderr is not None
        line = await asyncio.to_thread(cli.stderr.readline)
        assert orjson.loads(line)["type"] == "subscribed", line
        async with ThreadlineClient(settings) as tl:
            await tl.send_message("hi", agent_id="B16", resource_id=RES, thread_id=two)  # its neighbour first
            run_id = (await (await tl.send_message("hi", agent_id="B16", resource_id=RES, thread_id=one)).accepted).run_id
        out, err = await asyncio.to_thread(cli.communicate, timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 0, err
    chunks = [orjson.loads(ln) for ln in out.splitlines() if ln.strip()]
    assert {c["runId"] for c in chunks} == {run_id}
    assert [c["seq"] for c in chunks] == list(range(len(chunks))) and chunks[-1]["type"] == "finish"


async def test_the_gateways_event_ids_name_the_partition_and_resume_in_it(gateway, model, settings):
    from tests.e2e.gateway_http import TENANT_A, collect, finished, sse, thread_path

    model.queue({"chunks": [f"t{i} " for i in range(6)], "chunk_delay": 0.02}, model="threadline-gateway")
    thread = f"gw-sh-{uuid.uuid4().hex[:8]}"
    partition = chunk_place(Topics.of(settings), settings.chunk_partitions, TENANT_A, thread).partition
    path = thread_path(TENANT_A, thread)
    async with gateway.client(gateway.key_a) as http:
        await http.post(f"{path}/messages", json={"message": "go", "agent_id": "gateway"})
        opened = None
        async for ev in sse(http, f"{path}/events", params={"from": "beginning"}):
            opened = ev
            break
        whole = await collect(http, f"{path}/events", params={"from": "beginning"}, until=finished())
        # a bare offset (what a client builds from its offsets) is this stream's; another
        # partition's id names nothing here: the stream starts over
        after_two = await collect(http, f"{path}/events", headers={"Last-Event-ID": whole[1].id}, until=finished())
        bare = await collect(http, f"{path}/events", headers={"Last-Event-ID": whole[1].id.partition("/")[2]},
                             until=finished())
        other = f"{(partition + 1) % settings.chunk_partitions}/{whole[1].id.partition('/')[2]}"
        elsewhere = await collect(http, f"{path}/events", headers={"Last-Event-ID": other}, until=finished())
    assert opened is not None and opened.event == "subscribed" and opened.data["partition"] == partition
    assert all(e.id.startswith(f"{partition}/") for e in whole)
    seqs = [e.data["seq"] for e in whole]
    assert [e.data["seq"] for e in after_two] == [e.data["seq"] for e in bare] == seqs[2:]
    assert [e.data["seq"] for e in elsewhere] == seqs

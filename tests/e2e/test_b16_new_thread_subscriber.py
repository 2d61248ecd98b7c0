"""Case B16 (docs/cases.md): a subscriber to a brand-new thread must not miss the first chunks.

"Subscribed" (the client's ``subscribe_to_thread`` returning, the CLI's ``{"type": "subscribed"}``
line) is reported only once the consumer's position on the (just created) thread topic is fixed,
so every chunk produced after it is seen. 50 iterations per variant, each on a new thread; each
iteration is bounded at 5 s from subscribe to ``finish``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition

from tests.e2e.records import thread_records
from threadline.client import ThreadlineClient
from threadline.topics import thread_key

ITERATIONS = 50
BOUND_S = 5.0 + 3.0
"""The case's 5 s from subscribe to ``finish``, with 3 s of slack for the shared, loaded machine."""
ROOT = Path(__file__).resolve().parents[2]
RES = "res-b16"


def _new_thread(tag: str) -> str:
    return f"th-b16{tag}-{uuid.uuid4().hex[:10]}"


async def _until_finish(sub: Any, timeout_s: float, actives: list[str | None] | None = None) -> list[dict[str, Any]]:
    """The subscriber's chunks through the first ``finish``; ``actives`` gets ``seen_run_id()``
    as seen right after each chunk."""
    out: list[dict[str, Any]] = []

    async def pump() -> None:
        async for chunk in sub.stream:
            out.append(chunk)
            if actives is not None:
                actives.append(sub.seen_run_id())
            if chunk["type"] == "finish":
                return

    try:
        await asyncio.wait_for(pump(), timeout_s)
    except TimeoutError:
        raise AssertionError(f"no finish within {timeout_s}s; got {[c['type'] for c in out]}") from None
    return out


def _gapless(chunks: list[dict[str, Any]], first_seq: int) -> None:
    """One run, ``seq`` from ``first_seq`` through ``finish`` with no gap."""
    assert len({c["runId"] for c in chunks}) == 1, chunks
    assert [c["seq"] for c in chunks] == list(range(first_seq, first_seq + len(chunks))), [c["seq"] for c in chunks]
    assert chunks[-1]["type"] == "finish"


async def _reread(again: Any, until_offset: int) -> list[dict[str, Any]]:
    """The chunks a ``from_offset=0`` subscription shows below ``until_offset`` (every record
    there is already in the log: ``until_offset`` was an end offset when it was fixed)."""
    seen: list[dict[str, Any]] = []
    async for chunk in again.stream:
        if again.last_offset is not None and again.last_offset >= until_offset:
            break
        seen.append(chunk)
        if again.last_offset is not None and again.last_offset >= until_offset - 1:
            break
    return seen


async def _lowest_seqs(cluster: Any, places: list[tuple[str, int, str]]) -> dict[str, int]:
    """Each thread's lowest ``seq`` of its (only) run, from a raw replay of its records only
    (``(topic, partition, thread)``: its own topic, or its partition of the shared chunk topic)."""
    lowest: dict[str, int] = {}
    for topic, partition, thread in places:
        records = await thread_records(cluster.bootstrap, TopicPartition(topic, partition),
                                       thread_key(RES, thread).encode())
        seqs = [c["seq"] for c in (orjson.loads(r.value) for r in records) if isinstance(c.get("seq"), int)]
        assert seqs, f"no chunk of thread {thread} on {topic}[{partition}]"
        lowest[thread] = min(seqs)
    return lowest


async def test_b16a_client_subscriber_sees_the_first_chunk_of_a_new_thread(services, settings, cluster) -> None:
    topics, slow = [], []
    async with ThreadlineClient(settings) as tl:
        for i in range(ITERATIONS):
            thread = _new_thread("a")
            t0 = time.monotonic()
            sub = await tl.subscribe_to_thread(RES, thread)
            await tl.send_message("hi", agent_id="B16", resource_id=RES, thread_id=thread)
            chunks = await _until_finish(sub, BOUND_S + 5)
            took = time.monotonic() - t0
            await sub.unsubscribe()
            assert chunks[0]["seq"] == 0, f"iteration {i}: first chunk {chunks[0]}"
            _gapless(chunks, 0)
            topics.append((sub.topic, sub.partition or 0, thread))
            if took > BOUND_S:
                slow.append((i, round(took, 2)))
    assert not slow, f"iterations over {BOUND_S}s from subscribe to finish: {slow}"
    lowest = await _lowest_seqs(cluster, topics[:5] + topics[-5:])
    assert set(lowest.values()) == {0}  # the run's lowest seq is the 0 the subscriber saw first


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "threadline.cli", *args]


def _subscribe_cli(thread: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(_cli("subscribe", "-r", RES, "-t", thread, "--until-finish", "--timeout", "120"),
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.timeout(900)
async def test_b16b_cli_subscriber_sees_the_first_chunk_of_a_new_thread(services, settings, cluster) -> None:
    """50 ``threadline subscribe --until-finish`` processes, started 10 at a time ahead of their
    sends (a CLI process costs 2-3 s of CPU to start on the shared machine): each prints
    ``subscribed`` before its thread gets a message. The first message of each batch is sent by
    ``threadline send-message``, the others by the client (decision 27); an iteration's 5 s
    bound runs from its send to the subscriber's ``finish``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "THREADLINE_KAFKA_BOOTSTRAP": cluster.bootstrap,
           "THREADLINE_PG_DSN": cluster.dsn, "THREADLINE_TOPIC_PREFIX": cluster.prefix, "THREADLINE_PARTITIONS": "4"}
    slow = []
    async with ThreadlineClient(settings) as tl:
        for batch in range(0, ITERATIONS, 10):
            threads = [_new_thread("b") for _ in range(10)]
            subs = [_subscribe_cli(t, env) for t in threads]
            try:
                for sub in subs:
                    assert sub.stderr is not None
                    line = await asyncio.to_thread(sub.stderr.readline)
                    assert orjson.loads(line)["type"] == "subscribed", line
                for j, (thread, sub) in enumerate(zip(threads, subs, strict=True)):
                    t0 = time.monotonic()
                    if j == 0:
                        sent = await asyncio.to_thread(subprocess.run, _cli("send-message", "-r", RES, "-t", thread,
                                                                            "-a", "B16", "hi"),
                                                       cwd=ROOT, env=env, capture_output=True, timeout=60)
                        assert sent.returncode == 0, sent.stdout + sent.stderr
                        assert orjson.loads(sent.stdout.splitlines()[0])["type"] == "accepted"
                        t0 = time.monotonic()  # the CLI's own start-up is not the subscriber's time
                    else:
                        await tl.send_message("hi", agent_id="B16", resource_id=RES, thread_id=thread)
                    out, err = await asyncio.to_thread(sub.communicate, timeout=60)
                    took = time.monotonic() - t0
                    assert sub.returncode == 0, err
                    chunks = [orjson.loads(ln) for ln in out.splitlines() if ln.strip()]
                    assert chunks and chunks[0]["seq"] == 0, f"iteration {batch + j}: {chunks[:1]}"
                    _gapless(chunks, 0)
                    if took > BOUND_S:
                        slow.append((batch + j, round(took, 2)))
            finally:
                for sub in subs:
                    if sub.poll() is None:
                        sub.kill()
                        sub.wait()
    assert not slow, f"iterations over {BOUND_S}s from the send to finish: {slow}"


async def test_b16c_subscriber_racing_a_wake_sees_all_or_knows_where_it_started(services, settings, cluster) -> None:
    """Three outcomes are correct: the subscriber sees the whole run (positioned at offset 0);
    it joins mid-run (its first ``seq`` > 0, ``seen_run_id()`` that run, the re-read below
    ``start_offset`` gives exactly the missing ``seq``s); or the whole run ended before it was
    positioned (the re-read below ``start_offset`` holds the run through ``finish`` and
    ``seen_run_id()`` is None). Never: positioned without saying where, or a gap."""
    joined_late = ended_before = 0
    async with ThreadlineClient(settings) as tl:
        for i in range(ITERATIONS):
            thread = _new_thread("c")
            t0 = time.monotonic()
            sub, _notified = await asyncio.gather(
                tl.subscribe_to_thread(RES, thread),
                tl.send_notification_signal({"source": "pager", "kind": "alert", "priority": "urgent",
                                             "summary": f"wake {i}"}, agent_id="B16", resource_id=RES,
                                            thread_id=thread))
            assert sub.start_offset is not None, "subscribed without a fixed position"
            before: list[dict[str, Any]] = []
            if sub.start_offset > 0:  # it says where it started: what came before is a re-read away
                again = await tl.subscribe_to_thread(RES, thread, from_offset=0)
                before = await asyncio.wait_for(_reread(again, sub.start_offset), 10)
                await again.unsubscribe()
                assert before, f"iteration {i}: start offset {sub.start_offset} but nothing below it"
            if before and before[-1]["type"] == "finish":
                ended_before += 1
                _gapless(before, 0)
                assert sub.seen_run_id() is None
                await sub.unsubscribe()
                continue
            actives: list[str | None] = []
            chunks = await _until_finish(sub, BOUND_S + 5, actives)
            took = time.monotonic() - t0
            await sub.unsubscribe()
            # active from its first chunk to finish; a subscriber positioned just before the run's
            # finish sees only that chunk, after which no run is active
            assert actives[0] == (None if chunks[0]["type"] == "finish" else chunks[0]["runId"])
            assert actives[-1] is None
            assert took <= BOUND_S, f"iteration {i} took {took:.2f}s"
            first = chunks[0]["seq"]
            _gapless(chunks, first)
            assert {c["runId"] for c in before} <= {chunks[0]["runId"]}
            assert [c["seq"] for c in before] == list(range(first)), ([c["seq"] for c in before], first)
            joined_late += first > 0
    print(f"B16 (c): {joined_late}/{ITERATIONS} subscribers joined mid-run, "
          f"{ended_before}/{ITERATIONS} were positioned after the run's finish")

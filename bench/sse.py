"""Figure: time to first token over the HTTP gateway's Server-Sent Events beside the Kafka-native
client's (docs/gateway.md). Both measure a ``send_message`` to an idle thread → the first ``text-delta``
at the reader, model first-token delay 0, one run at a time:

* **kafka**: the Python client publishes to ingress; a subscriber of the thread's chunk topic
  sees the chunk (``bench.ttfc``'s path);
* **sse**: ``POST …/messages`` to the gateway (which publishes with its own client and answers
  once ``accepted``); an ``EventSource``-like reader of ``GET …/events`` already open on the
  thread sees the chunk the gateway forwards.

The two paths alternate run by run over their own threads (each warmed up once), so both see
the same machine load; the ratio sse/kafka is the gateway's cost (the HTTP request, its wait for
``accepted``, one more consumer and the SSE framing).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import httpx
import orjson

from bench.env import BenchEnv
from bench.stats import ratio, summary_ms
from bench.subscriber import is_type
from threadline.testing.containers import free_port

AGENT = "bench-ttfc"


async def _reader(http: httpx.AsyncClient, path: str, queue: asyncio.Queue[tuple[float, dict[str, Any]]],
                  opened: asyncio.Event) -> None:
    """Every chunk of one SSE stream into ``queue`` as ``(perf_counter, chunk)``."""
    async with http.stream("GET", f"{path}/events") as resp:
        data: list[str] = []
        async for line in resp.aiter_lines():
            if line.startswith("event: subscribed"):
                opened.set()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif line == "" and data:
                chunk = orjson.loads("\n".join(data))
                data = []
                if "type" in chunk:
                    queue.put_nowait((time.perf_counter(), chunk))


async def _sse_run(http: httpx.AsyncClient, path: str, queue: asyncio.Queue[tuple[float, dict[str, Any]]],
                   n: int) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = await http.post(f"{path}/messages", json={"message": f"Hello number {n}, how are you?", "agent_id": AGENT})
    r.raise_for_status()
    action, run_id, first = r.json()["action"], r.json().get("run_id"), None
    while True:
        t, chunk = await asyncio.wait_for(queue.get(), 60)
        if chunk.get("runId") != run_id:
            continue
        if first is None and chunk["type"] == "text-delta":
            first = t - t0
        if chunk["type"] == "finish":
            return (first if first is not None else float("nan")), action


async def _kafka_run(env: BenchEnv, resource: str, thread: str, topic: str, n: int) -> tuple[float, str]:
    assert env.client is not None and env.subscriber is not None
    start = len(env.subscriber.by_topic[topic])
    t0 = time.perf_counter()
    sent = await env.client.send_message(f"Hello number {n}, how are you?", agent_id=AGENT, resource_id=resource,
                                         thread_id=thread)
    i, first = await env.subscriber.wait(topic, is_type("text-delta"), start=start)
    accepted = await sent.accepted
    await env.subscriber.wait(topic, is_type("finish"), start=i)
    return first.t - t0, accepted.action


async def run(env: BenchEnv, *, runs: int = 200, threads: int = 10) -> dict[str, Any]:
    assert env.services is not None
    port = free_port()
    await asyncio.to_thread(env.services.start, "gateway", "gateway-1", THREADLINE_GATEWAY_PORT=str(port),
                            THREADLINE_GATEWAY_HOST="127.0.0.1", THREADLINE_GATEWAY_OPEN="true")
    kafka_pairs = [("bench-user", f"sse-k-{i}") for i in range(threads)]
    sse_paths = [f"/v1/resources/bench-user/threads/sse-h-{i}" for i in range(threads)]
    topics = await env.chunk_topics(kafka_pairs)
    readers: list[asyncio.Task[None]] = []
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
        try:
            queues: list[asyncio.Queue[tuple[float, dict[str, Any]]]] = []
            for i, path in enumerate(sse_paths):  # the first message creates the thread; then a stream stays open
                await http.post(f"{path}/messages", json={"message": "warm-up", "agent_id": AGENT})
                queue: asyncio.Queue[tuple[float, dict[str, Any]]] = asyncio.Queue()
                opened = asyncio.Event()
                readers.append(asyncio.create_task(_reader(http, path, queue, opened), name=f"sse-{i}"))
                await asyncio.wait_for(opened.wait(), 60)
                queues.append(queue)
            for i, (resource, thread) in enumerate(kafka_pairs):
                await _kafka_run(env, resource, thread, topics[i], -1)
            await asyncio.sleep(2)  # the warm-up runs end
            for q in queues:
                while not q.empty():
                    q.get_nowait()
            kafka, sse, actions = [], [], {"kafka": {}, "sse": {}}
            for n in range(runs):
                k = n % threads
                for name in ("kafka", "sse"):
                    dt, action = await (_kafka_run(env, *kafka_pairs[k], topics[k], n) if name == "kafka"
                                        else _sse_run(http, sse_paths[k], queues[k], n))
                    actions[name][action] = actions[name].get(action, 0) + 1
                    if action == "wake":  # a thread still busy would measure a delivery
                        (kafka if name == "kafka" else sse).append(dt)
        finally:
            for task in readers:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
    ours, base = summary_ms(sse), summary_ms(kafka)
    return {"conditions": {"runs": runs, "threads_per_path": threads, "concurrency": 1, "agent": AGENT,
                           "model_first_token_delay_s": 0, "interleaved": True,
                           "sse": "POST /messages to the gateway (open auth) → first text-delta event on an open SSE stream",
                           "kafka": "ThreadlineClient.send_message → first text-delta at a chunk-topic subscriber"},
            "sse_ms": ours, "kafka_ms": base, "accepted_actions": actions,
            "ratio": {"p50": ratio(ours["p50"], base["p50"]), "p99": ratio(ours["p99"], base["p99"])}}

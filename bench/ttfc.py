"""Figure 1: time to first chunk. ``send_message`` published to ingress for an idle thread →
the first ``text-delta`` at a subscriber of the thread's chunk topic, model first-token delay 0.

Runs go one at a time (concurrency 1) round-robin over ``threads`` threads, each thread used
once before measuring (warm-up: its chunk topic is known to the worker, as for any thread that
has spoken before), so every measured thread is idle and has a short history. Baseline in the
same run: bare aiokafka relays over the same Kafka hops (three hops with ingress starting the run,
``THREADLINE_INGRESS_STARTS``; four through the orchestrator), with records of the sizes
Threadline sent on each hop (``bench.rawkafka``), and over the old path's four hops.

On a brand-new thread (``new_thread``, the figure's second part): ``subscribe_to_thread`` of
a thread that never spoke (its chunk topic created then), ``send_message``, and the first
``text-delta`` through that subscription, one thread after another; the subscription's share and
the worker's ``step start`` lines of those runs beside it.

Where the time goes: ``spans_ms``, per run from the records' Kafka timestamps (the hops and each
service's share), and ``worker_step_start_ms``, the worker's own ``step start`` lines of the
measured runs (:data:`threadline.worker.step_gap.START_SEGMENTS`: claim, setup, the model call's
open, its first text).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.env import BenchEnv
from bench.procstat import PySpy, top_costs
from bench.rawkafka import relay_latencies, relay_linger_ms
from bench.stats import all_records, log_segments, ratio, recent_record_sizes, summary_ms
from bench.subscriber import is_type
from threadline.config import Settings
from threadline.worker.step_gap import START_SEGMENTS

AGENT = "bench-ttfc"


@dataclass(slots=True)
class _Run:
    dt: float
    action: str
    size: int
    run_id: str
    sent_ms: float
    """Wall clock (ms) when the request was sent."""
    chunk_ts_ms: float
    """The first text-delta's Kafka timestamp (the worker's create time)."""
    chunk_wall_ms: float
    """Wall clock (ms) when the subscriber fetched it."""


async def _one(env: BenchEnv, resource: str, thread: str, topic: str, n: int) -> _Run:
    assert env.client is not None and env.subscriber is not None
    sub = env.subscriber
    start = len(sub.by_topic[topic])
    t0, sent_ms = time.perf_counter(), time.time() * 1000
    sent = await env.client.send_message(f"Hello number {n}, how are you?", agent_id=AGENT,
                                         resource_id=resource, thread_id=thread)
    i, first = await sub.wait(topic, is_type("text-delta"), start=start)
    accepted = await sent.accepted
    await sub.wait(topic, is_type("finish"), start=i)
    return _Run(first.t - t0, accepted.action, first.size, accepted.run_id or "", sent_ms, first.ts_ms,
                first.wall_ms)


async def _runs(env: BenchEnv, threads: list[tuple[str, str]], topics: list[str], count: int,
                offset: int) -> tuple[list[float], dict[str, int], list[int], list[_Run]]:
    times, actions, sizes, woken = [], {}, [], []
    for n in range(count):
        (resource, thread), topic = threads[n % len(threads)], topics[n % len(threads)]
        one = await _one(env, resource, thread, topic, offset + n)
        actions[one.action] = actions.get(one.action, 0) + 1
        if one.action == "wake":  # a thread still busy would have measured a delivery, not a wake
            times.append(one.dt)
            woken.append(one)
        sizes.append(one.size)
    return times, actions, sizes, woken


async def _produced_at(bootstrap: str, topic: str, kind: str) -> dict[str, float]:
    """run id → Kafka timestamp (ms) of the first ``kind`` record of the run on ``topic``."""
    out: dict[str, float] = {}
    for r in await all_records(bootstrap, topic):
        body = orjson.loads(r.value) if r.value else None
        run_id = body.get("run_id") or body.get("runId") if isinstance(body, dict) else None  # events / chunks
        if run_id and body.get("type") == kind:
            out.setdefault(run_id, r.timestamp)
    return out


async def _spans(env: BenchEnv, woken: list[_Run]) -> dict[str, Any]:
    """Where the time to first chunk goes, per run, from the records' Kafka timestamps (the
    producers' create times, ms resolution, one machine's clock): request sent → ``StartRun``
    produced (ingress: its hop and transaction) → step task produced → first chunk produced (the
    worker: its hop, the claim, the model call) → fetched by the subscriber. p50 of each, ms."""
    starts = await _produced_at(env.bootstrap, env.topics.run_commands, "start_run")
    tasks = await _produced_at(env.bootstrap, env.topics.step_tasks, "step_task")
    spans: dict[str, list[float]] = {"sent_to_start_run_produced": [], "sent_to_step_task_produced": [],
                                     "step_task_to_first_chunk_produced": [], "first_chunk_produced_to_fetched": []}
    for w in woken:
        if w.run_id not in tasks or w.run_id not in starts:
            continue
        spans["sent_to_start_run_produced"].append(starts[w.run_id] - w.sent_ms)
        spans["sent_to_step_task_produced"].append(tasks[w.run_id] - w.sent_ms)
        spans["step_task_to_first_chunk_produced"].append(w.chunk_ts_ms - tasks[w.run_id])
        spans["first_chunk_produced_to_fetched"].append(w.chunk_wall_ms - w.chunk_ts_ms)
    return {k: {"p50": round(statistics.median(v), 1), "p90": round(statistics.quantiles(v, n=10)[-1], 1),
                "runs": len(v)} for k, v in spans.items() if len(v) >= 2}


@dataclass(slots=True)
class NewThreadRun:
    """One run on a thread that never spoke, through a subscription made just before it."""

    topic: str
    run_id: str
    subscribe_s: float
    """``subscribe_to_thread`` (the thread's topic made then)."""
    first_chunk_s: float
    """From the subscribe call to the run's first chunk through the subscription."""
    first_text_s: float | None
    """From the subscribe call to its first ``text-delta`` (``None``: none came)."""
    sent_ms: float
    """Wall clock (ms) when the request was sent."""
    first_text_ms: float | None
    """Wall clock (ms) when the first ``text-delta`` came."""


async def subscribed_run(env: BenchEnv, thread: str, text: str, *, timeout_s: float = 30) -> NewThreadRun:
    """Subscribe to ``thread`` (resource ``bench-user``), send ``text`` to the ``bench-ttfc``
    agent and read the subscription until the run's ``finish``.

    Raises:
        TimeoutError: no ``finish`` within ``timeout_s``.
    """
    assert env.client is not None
    t0 = time.perf_counter()
    sub = await env.client.subscribe_to_thread("bench-user", thread)
    subscribed = time.perf_counter() - t0
    first_chunk: float | None = None
    first_text: float | None = None
    first_text_ms: float | None = None
    try:
        sent_ms = time.time() * 1000
        sent = await env.client.send_message(text, agent_id=AGENT, resource_id="bench-user", thread_id=thread)
        async with asyncio.timeout(timeout_s):
            async for chunk in sub.stream:
                if first_chunk is None:
                    first_chunk = time.perf_counter() - t0
                if first_text is None and chunk.get("type") == "text-delta":
                    first_text, first_text_ms = time.perf_counter() - t0, time.time() * 1000
                if chunk.get("type") == "finish":
                    break
    finally:
        await sub.unsubscribe()
    assert first_chunk is not None  # the stream ended at a finish
    return NewThreadRun(sub.topic, (await sent.accepted).run_id or "", subscribed, first_chunk, first_text,
                        sent_ms, first_text_ms)


async def _new_threads(env: BenchEnv, count: int) -> dict[str, Any]:
    """``count`` brand-new threads one after another (:func:`subscribed_run`)."""
    log_path = env.log_dir / f"{env.workers[0]}.log"
    log_from = log_path.stat().st_size if log_path.exists() else 0
    whole, subscribe, run_part = [], [], []
    seen: list[tuple[str, str, str, float, float]] = []  # (thread, topic, run id, sent, first text seen)
    for n in range(count):
        thread = f"ttfc-new-{env.tag}-{n}"
        one = await subscribed_run(env, thread, f"Hello number {n}, how are you?")
        if one.first_text_s is not None and one.first_text_ms is not None:
            whole.append(one.first_text_s)
            subscribe.append(one.subscribe_s)
            run_part.append(one.first_text_s - one.subscribe_s)
            seen.append((thread, one.topic, one.run_id, one.sent_ms, one.first_text_ms))
    return {"runs": count, "first_text_ms": summary_ms(whole), "subscribe_ms": summary_ms(subscribe),
            "send_to_first_text_ms": summary_ms(run_part), "spans_ms": await _new_spans(env, seen),
            "worker_step_start_ms": log_segments(log_path, log_from, "step start", START_SEGMENTS),
            "target": {"p50_ms": 30}}


async def _new_spans(env: BenchEnv, seen: list[tuple[str, str, str, float, float]]) -> dict[str, Any]:
    """The send → first text of the new threads (``(thread, topic, run id, sent, seen)``, wall
    ms) split by the records' Kafka timestamps (as :func:`_spans`): sent → the request produced
    (the client) → step task produced (ingress) → first ``text-delta`` produced (the worker) →
    seen through the subscription. p50 / p90, ms."""
    tasks = await _produced_at(env.bootstrap, env.topics.step_tasks, "step_task")
    requests: dict[str, float] = {}  # thread id → its (one) request's Kafka timestamp
    for r in await all_records(env.bootstrap, env.topics.ingress):
        body = orjson.loads(r.value) if r.value else None
        if isinstance(body, dict) and isinstance(body.get("thread_id"), str):
            requests.setdefault(body["thread_id"], r.timestamp)
    spans: dict[str, list[float]] = {"sent_to_request_produced": [], "request_to_step_task_produced": [],
                                     "step_task_to_first_chunk_produced": [], "first_chunk_produced_to_seen": []}
    for thread, topic, run_id, sent_ms, seen_ms in seen:
        chunk_ts = (await _produced_at(env.bootstrap, topic, "text-delta")).get(run_id)
        if run_id not in tasks or chunk_ts is None or thread not in requests:
            continue
        spans["sent_to_request_produced"].append(requests[thread] - sent_ms)
        spans["request_to_step_task_produced"].append(tasks[run_id] - requests[thread])
        spans["step_task_to_first_chunk_produced"].append(chunk_ts - tasks[run_id])
        spans["first_chunk_produced_to_seen"].append(seen_ms - chunk_ts)
    return {k: {"p50": round(statistics.median(v), 1), "p90": round(statistics.quantiles(v, n=10)[-1], 1),
                "runs": len(v)} for k, v in spans.items() if len(v) >= 2}


async def run(env: BenchEnv, *, runs: int = 500, threads: int = 50, profile_runs: int = 150,
              profile_dir: Path | None = None, stamp: str = "", new_threads: int = 100) -> dict[str, Any]:
    assert env.admin is not None and env.subscriber is not None
    pairs = [("bench-user", f"ttfc-{i}") for i in range(threads)]
    topics = await env.chunk_topics(pairs)
    await _runs(env, pairs, topics, threads, 0)  # warm-up: each thread speaks once
    log_path = env.log_dir / f"{env.workers[0]}.log"
    log_from = log_path.stat().st_size if log_path.exists() else 0
    times, actions, delta_sizes, woken = await _runs(env, pairs, topics, runs, threads)
    in_worker = log_segments(log_path, log_from, "step start", START_SEGMENTS)
    spans = await _spans(env, woken)
    # the path's hops: ingress → step-tasks → chunks when ingress starts the run (decision 34),
    # else ingress → run-commands → step-tasks → chunks; the baseline relays over the same hops,
    # and over the four hops of the old path too (comparable with earlier figures)
    starts = Settings().ingress_starts
    path = [env.topics.ingress, env.topics.step_tasks] if starts else \
        [env.topics.ingress, env.topics.run_commands, env.topics.step_tasks]
    sizes_by_topic = {}
    for topic in (env.topics.ingress, env.topics.run_commands, env.topics.step_tasks):
        sizes = await recent_record_sizes(env.bootstrap, topic)
        sizes_by_topic[topic] = int(statistics.median(sizes)) if sizes else 500
    delta = int(statistics.median(delta_sizes))
    hop_sizes = [sizes_by_topic[t] for t in path] + [delta]
    four = [sizes_by_topic[t] for t in (env.topics.ingress, env.topics.run_commands, env.topics.step_tasks)] + [delta]
    kw = {"bootstrap": env.bootstrap, "admin": env.admin, "subscriber": env.subscriber, "prefix": env.prefix,
          "partitions": env.partitions, "runs": runs}
    base = await relay_latencies(sizes=hop_sizes, **kw)
    base4 = base if len(hop_sizes) == 4 else await relay_latencies(sizes=four, **kw)
    ours, theirs = summary_ms(times), summary_ms(base)
    out: dict[str, Any] = {
        "conditions": {"runs": runs, "concurrency": 1, "threads": threads, "warmup_runs_per_thread": 1,
                       "agent": "no processors, one system message", "model_first_token_delay_s": 0,
                       "reply": "the model's default echo, ~8 word chunks",
                       "instances": "1 per service", "partitions_internal_topics": env.partitions,
                       "ingress_starts": starts, "kafka_hops": len(hop_sizes), "record_bytes_per_hop": hop_sizes,
                       "baseline": f"{len(hop_sizes) - 1} aiokafka relay processes (consumer group → producer, "
                                   f"linger {relay_linger_ms()} ms, as the services') over the path's {len(hop_sizes)} topics"},
        "threadline_ms": ours, "baseline_ms": theirs, "baseline_4_hops_ms": summary_ms(base4),
        "accepted_actions": actions, "spans_ms": spans, "worker_step_start_ms": in_worker,
        "ratio": {"p50": ratio(ours["p50"], theirs["p50"]), "p99": ratio(ours["p99"], theirs["p99"])},
        "target": {"p50_ms": 15, "p99_ms": 50, "ratio_max": 1.5},
    }
    if new_threads:
        out["new_thread"] = await _new_threads(env, new_threads)
    if profile_runs and profile_dir is not None:
        out["profile"] = await _profile(env, pairs, topics, profile_runs, profile_dir, stamp)
    return out


async def _profile(env: BenchEnv, pairs: list[tuple[str, str]], topics: list[str], count: int,
                   profile_dir: Path, stamp: str) -> dict[str, Any]:
    """Extra runs (not in the figure) with py-spy on each of the three services on the path."""
    spies = {name: PySpy(env.pid(f"{name}-1"), profile_dir / f"{stamp}-ttfc-{name}.collapsed.txt")
             for name in ("ingress", "run_orchestrator", "processor_worker")}
    if not all(s.start() for s in spies.values()):
        return {"error": "py-spy not installed"}
    await _runs(env, pairs, topics, count, 100_000)
    out: dict[str, Any] = {"runs": count}
    for name, spy in spies.items():
        path = spy.stop()
        out[name] = {"file": path.name if path else None, **(top_costs(path) if path else {})}
    return out

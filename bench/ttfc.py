"""Figure 1: time to first chunk. ``send_message`` published to ingress for an idle thread →
the first ``text-delta`` at a subscriber of the thread's chunk topic, model first-token delay 0.

Runs go one at a time (concurrency 1) round-robin over ``threads`` threads, each thread used
once before measuring (warm-up: its chunk topic is known to the worker, as for any thread that
has spoken before), so every measured thread is idle and has a short history. Baseline in the
same run: three bare aiokafka relays over the same four Kafka hops with records of the sizes
Threadline sent on each hop (``bench.rawkafka``).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from bench.env import BenchEnv
from bench.procstat import PySpy, top_costs
from bench.rawkafka import relay_latencies
from bench.stats import ratio, recent_record_sizes, summary_ms
from bench.subscriber import is_type

AGENT = "bench-ttfc"


async def _one(env: BenchEnv, resource: str, thread: str, topic: str, n: int) -> tuple[float, str, int]:
    assert env.client is not None and env.subscriber is not None
    sub = env.subscriber
    start = len(sub.by_topic[topic])
    t0 = time.perf_counter()
    sent = await env.client.send_message(f"Hello number {n}, how are you?", agent_id=AGENT,
                                         resource_id=resource, thread_id=thread)
    i, first = await sub.wait(topic, is_type("text-delta"), start=start)
    accepted = await sent.accepted
    await sub.wait(topic, is_type("finish"), start=i)
    return first.t - t0, accepted.action, first.size


async def _runs(env: BenchEnv, threads: list[tuple[str, str]], topics: list[str], count: int,
                offset: int) -> tuple[list[float], dict[str, int], list[int]]:
    times, actions, sizes = [], {}, []
    for n in range(count):
        (resource, thread), topic = threads[n % len(threads)], topics[n % len(threads)]
        dt, action, size = await _one(env, resource, thread, topic, offset + n)
        actions[action] = actions.get(action, 0) + 1
        if action == "wake":  # a thread still busy would have measured a delivery, not a wake
            times.append(dt)
        sizes.append(size)
    return times, actions, sizes


async def run(env: BenchEnv, *, runs: int = 500, threads: int = 50, profile_runs: int = 150,
              profile_dir: Path | None = None, stamp: str = "") -> dict[str, Any]:
    assert env.admin is not None and env.subscriber is not None
    pairs = [("bench-user", f"ttfc-{i}") for i in range(threads)]
    topics = await env.chunk_topics(pairs)
    await _runs(env, pairs, topics, threads, 0)  # warm-up: each thread speaks once
    times, actions, delta_sizes = await _runs(env, pairs, topics, runs, threads)
    hop_sizes = []
    for topic in (env.topics.ingress, env.topics.run_commands, env.topics.step_tasks):
        sizes = await recent_record_sizes(env.bootstrap, topic)
        hop_sizes.append(int(statistics.median(sizes)) if sizes else 500)
    hop_sizes.append(int(statistics.median(delta_sizes)))
    base = await relay_latencies(bootstrap=env.bootstrap, admin=env.admin, subscriber=env.subscriber,
                                 prefix=env.prefix, sizes=hop_sizes, partitions=env.partitions, runs=runs)
    ours, theirs = summary_ms(times), summary_ms(base)
    out: dict[str, Any] = {
        "conditions": {"runs": runs, "concurrency": 1, "threads": threads, "warmup_runs_per_thread": 1,
                       "agent": "no processors, one system message", "model_first_token_delay_s": 0,
                       "reply": "the model's default echo, ~8 word chunks",
                       "instances": "1 per service", "partitions_internal_topics": env.partitions,
                       "kafka_hops": 4, "record_bytes_per_hop": hop_sizes,
                       "baseline": "3 aiokafka relay processes (consumer group → producer, linger 2 ms) over 4 topics"},
        "threadline_ms": ours, "baseline_ms": theirs, "accepted_actions": actions,
        "ratio": {"p50": ratio(ours["p50"], theirs["p50"]), "p99": ratio(ours["p99"], theirs["p99"])},
        "target": {"p50_ms": 20, "p99_ms": 80, "ratio_max": 2.0},
    }
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

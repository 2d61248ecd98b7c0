"""Figure 4: signal latency. A run is streaming (``chunks`` tokens, ``chunk_delay`` apart); as
soon as its first ``text-delta`` reaches the subscriber, a second ``send_message`` goes to the
same thread. Measured per sample:

* ``accepted``: send → the ``accepted`` reply with ``action: deliver`` at the client;
* ``echo``: send → the message's echo chunk (``data-user-message``) on the thread's stream. A
  delivered message joins the run at its next step boundary (docs/decisions.md#pre-emption), so this includes the rest
  of the model's stream;
* ``boundary_to_echo``: the first step's ``step-finish`` chunk → the echo chunk, both at the
  subscriber: what the runtime spends between two steps (persist the step, step result to the
  orchestrator, next step task, load state and drain the signal) — the "agent step overhead
  through all services, model excluded" of the targets.

Samples run one at a time, round-robin over ``threads`` threads.

``worker_step_gap_ms``: the same boundary as the worker saw it, split where it went (the worker's
``step gap`` log lines of the measured samples, :mod:`threadline.worker.step_gap`): chunk flush,
save-and-claim, result publish, hand-over to the next step, the next step's setup up to its first
chunk (the echo). What the subscriber sees beyond ``total_ms`` is Kafka's delivery of the two
chunks to the subscriber.
"""

from __future__ import annotations

import time
from typing import Any

from bench.env import BenchEnv
from bench.stats import ratio, summary_ms, worker_step_gap
from bench.subscriber import is_type

AGENT = "bench-signals"
MODEL = "threadline-bench-signals"


async def _sample(env: BenchEnv, thread: str, topic: str, k: int, chunks: int, chunk_delay: float) -> dict[str, Any]:
    assert env.client is not None and env.subscriber is not None and env.script is not None
    sub = env.subscriber
    await env.script.aqueue({"chunks": [f"a{i} " for i in range(chunks)], "chunk_delay": chunk_delay}, model=MODEL)
    start = len(sub.by_topic[topic])
    woke = await env.client.send_message(f"Tell me a story {k}.", agent_id=AGENT, resource_id="bench-user",
                                         thread_id=thread)
    i, _ = await sub.wait(topic, is_type("text-delta"), start=start)
    await woke.accepted
    t0 = time.perf_counter()
    sent = await env.client.send_message(f"And one more thing {k}.", agent_id=AGENT, resource_id="bench-user",
                                         thread_id=thread)
    accepted = await sent.accepted
    t_acc = time.perf_counter()
    j, echo = await sub.wait(topic, is_type("data-user-message"), start=i)
    got = sub.by_topic[topic]
    finish_of_step = next((got[x] for x in range(j - 1, i - 1, -1) if got[x].chunk.get("type") == "step-finish"), None)
    await sub.wait(topic, is_type("finish"), start=j)
    return {"action": accepted.action, "accepted": t_acc - t0, "echo": echo.t - t0,
            "boundary": echo.t - finish_of_step.t if finish_of_step else None}


async def run(env: BenchEnv, *, samples: int = 150, threads: int = 30, chunks: int = 20,
              chunk_delay: float = 0.01) -> dict[str, Any]:
    names = [f"sig-{i}" for i in range(threads)]
    topics = await env.chunk_topics([("bench-user", t) for t in names])
    for n in range(threads):  # warm-up: every thread once
        await _sample(env, names[n], topics[n], -n - 1, 3, 0)
    log_path = env.log_dir / f"{env.workers[0]}.log"
    log_from = log_path.stat().st_size if log_path.exists() else 0
    acc, echo, boundary = [], [], []
    actions: dict[str, int] = {}
    for k in range(samples):
        s = await _sample(env, names[k % threads], topics[k % threads], k, chunks, chunk_delay)
        actions[s["action"]] = actions.get(s["action"], 0) + 1
        if s["action"] != "deliver":  # the run ended before the message arrived: not a delivery
            continue
        acc.append(s["accepted"])
        echo.append(s["echo"])
        if s["boundary"] is not None:
            boundary.append(s["boundary"])
    accepted, echoes, boundaries = summary_ms(acc), summary_ms(echo), summary_ms(boundary)
    return {
        "conditions": {"samples": samples, "concurrency": 1, "threads": threads,
                       "active_run": f"{chunks} chunks, {chunk_delay * 1000:.0f} ms apart; message sent at its first text-delta",
                       "instances": "1 per service", "agent": "no processors"},
        "accepted_deliver_ms": accepted, "echo_ms": echoes, "step_boundary_to_echo_ms": boundaries,
        "worker_step_gap_ms": worker_step_gap(log_path, log_from),
        "accepted_actions": actions,
        "ratio_to_target": {"accepted_p99": ratio(accepted.get("p99", float("nan")), 20),
                            "boundary_p50": ratio(boundaries.get("p50", float("nan")), 10)},
        "target": {"accepted_p99_ms": 20, "step_overhead_p50_ms": 10},
    }


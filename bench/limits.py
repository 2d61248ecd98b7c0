"""Figure 7: cluster-wide provider limits. ``runs`` runs start at once on ``runs`` threads against a
fake provider that answers 429 (``Retry-After: 1``) above ``rps`` requests/s, served by two
processor-workers. Measured twice, each on its own fresh services: without limits (every worker
calls as fast as its runs ask, then retries on 429 with backoff, ``max_retries`` 2), and with
``THREADLINE_MODEL_LIMITS`` set to 80 % of the provider's rate (one bucket in PostgreSQL shared by
both workers, calls evenly spaced). Per condition: failed runs, model calls, calls answered 429 and
their share, and the wall time from the first send to the last ``finish``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from bench.env import BenchEnv
from bench.subscriber import is_type

AGENT = "bench-limits"
MODEL = "threadline-bench-limits"
SHARE = 0.8
"""The configured limit as a share of the provider's rate: the headroom absorbs calls that a loaded
worker sends later than their turn and so bunches with the next ones."""


async def _condition(limits: bool, runs: int, rps: float, partitions: int) -> dict[str, Any]:
    extra = {"THREADLINE_MODEL_RETRY_INITIAL_S": "0.5"}
    if limits:
        extra |= {"THREADLINE_MODEL_LIMITS": json.dumps({f"openai/{MODEL}": {"rpm": rps * 60 * SHARE}}),
                  "THREADLINE_MODEL_LIMIT_BURST_S": "0"}
    env = BenchEnv(partitions=partitions, extra_env=extra)
    try:
        await env.start()
        logging.disable(logging.ERROR)  # aiokafka on brand-new topics: "leader not yet known"
        assert env.client is not None and env.subscriber is not None and env.script is not None
        await env.set_workers(2)
        threads = [f"lim-{i}" for i in range(runs)]
        topics = await env.chunk_topics([("bench-user", t) for t in threads])
        await env.script.aqueue({"text": "ok", "times": 100_000}, model=MODEL)
        await env.script.alimit(MODEL, rps)
        t0 = time.perf_counter()
        sent = await asyncio.gather(*(env.client.send_message("hi", agent_id=AGENT, resource_id="bench-user",
                                                              thread_id=t) for t in threads))
        await asyncio.gather(*(s.accepted for s in sent))
        await asyncio.gather(*(env.subscriber.wait(topic, is_type("finish"), timeout_s=900) for topic in topics))
        wall = time.perf_counter() - t0
        failed = sum(1 for topic in topics if any(r.chunk.get("type") == "error"
                                                  for r in env.subscriber.by_topic[topic]))
        calls = env.script.requests(model=MODEL)
        limited = sum(1 for r in calls if r.get("limited"))
        return {"limits": f"rpm {rps * 60 * SHARE:g} ({SHARE:.0%} of the provider)" if limits else "none",
                "runs": runs, "failed_runs": failed, "model_calls": len(calls), "calls_429": limited,
                "share_429_pct": round(100 * limited / max(1, len(calls)), 2), "wall_s": round(wall, 1)}
    finally:
        await env.stop()


async def run(*, runs: int = 200, rps: float = 20, partitions: int = 6) -> dict[str, Any]:
    without = await _condition(False, runs, rps, partitions)
    with_limits = await _condition(True, runs, rps, partitions)
    return {"conditions": {"runs": runs, "provider_rps": rps, "workers": 2, "retry_after_s": 1,
                           "max_retries": 2, "reply": "one short text answer per run"},
            "without_limits": without, "with_limits": with_limits,
            "target": {"failed_runs": 0, "share_429_pct_max": 5}}

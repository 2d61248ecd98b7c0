"""Figure 2: chunk throughput of one run. The model streams ``tokens`` distinct word chunks as
fast as it can (no delay) through three pass-through ``process_output_stream`` processors;
chunks/s is counted at the subscriber from the first to the last ``text-delta``. Baseline in
the same run: the very same records (bytes re-encoded identically) produced by a bare aiokafka
producer in another process to a fresh one-partition topic, consumed by the same subscriber.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from bench.env import BenchEnv
from bench.procstat import PySpy, cpu_seconds, top_costs
from bench.rawkafka import raw_throughput, relay_linger_ms
from bench.stats import ratio
from bench.subscriber import is_type

AGENT = "bench-throughput"
MODEL = "threadline-bench-throughput"


async def _stream(env: BenchEnv, thread: str, topic: str, tokens: int) -> dict[str, Any]:
    assert env.client is not None and env.subscriber is not None and env.script is not None
    await env.script.aqueue({"chunks": [f"w{i} " for i in range(tokens)]}, model=MODEL)
    sub, pid = env.subscriber, env.worker_pids()[0]
    start = len(sub.by_topic[topic])
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    sent = await env.client.send_message("Stream, please.", agent_id=AGENT, resource_id="bench-user", thread_id=thread)
    await sent.accepted
    await sub.wait(topic, is_type("finish"), start=start, timeout_s=600)
    t_end, cpu1 = time.perf_counter(), cpu_seconds(pid)
    got = sub.by_topic[topic][start:]
    deltas = [r for r in got if r.chunk.get("type") == "text-delta"]
    span = (deltas[-1].t - deltas[0].t) or float("nan")  # a short stream may come in one fetch
    return {"text_deltas": len(deltas), "records": got, "span_s": round(span, 3),
            "chunks_per_s": round((len(deltas) - 1) / span, 1), "first_delta_s": round(deltas[0].t - t0, 4),
            "send_to_finish_s": round(t_end - t0, 3), "worker_cpu_cores": round((cpu1 - cpu0) / (t_end - t0), 2),
            "worker_cpu_us_per_chunk": round((cpu1 - cpu0) / len(deltas) * 1e6, 1),
            "delta_record_bytes": deltas[len(deltas) // 2].size}


async def run(env: BenchEnv, *, tokens: int = 20_000, profile_dir: Path | None = None,
              stamp: str = "", profile: bool = True) -> dict[str, Any]:
    assert env.admin is not None and env.subscriber is not None
    topics = await env.chunk_topics([("bench-user", "throughput-warm"), ("bench-user", "throughput-0"),
                                     ("bench-user", "throughput-profile")])
    await _stream(env, "throughput-warm", topics[0], 200)  # warm-up: imports, connections, topic known
    ours = await _stream(env, "throughput-0", topics[1], tokens)
    records = [orjson.dumps(r.chunk) for r in ours.pop("records")]
    base = await raw_throughput(bootstrap=env.bootstrap, admin=env.admin, subscriber=env.subscriber,
                                topic=f"{env.prefix}.raw-throughput", records=records)
    out: dict[str, Any] = {
        "conditions": {"tokens": tokens, "processors": "3 pass-through process_output_stream",
                       "model_chunk_delay_s": 0, "instances": "1 per service", "chunk_topic_partitions": 1,
                       "record_bytes": ours["delta_record_bytes"],
                       "baseline": f"same records, one aiokafka producer process (linger {relay_linger_ms()} ms as the "
                                   "services', acks=all) → same subscriber"},
        "threadline": ours, "baseline": {k: round(v, 3) for k, v in base.items()},
        "ratio": ratio(ours["chunks_per_s"], base["chunks_per_s"]),
        "target": {"chunks_per_s": 20_000, "ratio_min": 0.5},
    }
    if profile and profile_dir is not None:
        spy = PySpy(env.worker_pids()[0], profile_dir / f"{stamp}-throughput-processor_worker.collapsed.txt")
        if spy.start():
            again = await _stream(env, "throughput-profile", topics[2], tokens)
            again.pop("records")
            path = spy.stop()
            out["profile"] = {"run": again, "file": path.name if path else None,
                              **(top_costs(path, 12) if path else {})}
    return out

"""Figure 2: chunk throughput of one run. The model streams ``tokens`` distinct word chunks as
fast as it can (no delay) through three pass-through ``process_output_stream`` processors;
chunks/s is counted at the subscriber from the first to the last ``text-delta``. Baseline in
the same run: the very same records (bytes re-encoded identically) produced by a bare aiokafka
producer in another process to a fresh one-partition topic, consumed by the same subscriber.
Both are short (20,000 chunks take a fraction of a second), so each is measured ``repeats``
times, alternated with the other, and the figure is the median of each (the ratio is of the
medians; each pair's ratio is kept beside it).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import orjson

from bench.env import BenchEnv
from bench.procstat import PySpy, cpu_seconds, top_costs
from bench.rawkafka import raw_throughput, relay_linger_ms
from bench.stats import arrival_rate, ratio
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
    rate = arrival_rate([r.t for r in deltas])
    return {"text_deltas": len(deltas), "records": got, "span_s": round(rate["seconds"], 3),
            "chunks_per_s": round(rate["chunks_per_s"], 1), "batches": rate["batches"],
            "first_batch": rate["first_batch"], "first_delta_s": round(deltas[0].t - t0, 4),
            "send_to_finish_s": round(t_end - t0, 3), "worker_cpu_cores": round((cpu1 - cpu0) / (t_end - t0), 2),
            "worker_cpu_us_per_chunk": round((cpu1 - cpu0) / len(deltas) * 1e6, 1),
            "delta_record_bytes": deltas[len(deltas) // 2].size}


async def run(env: BenchEnv, *, tokens: int = 20_000, profile_dir: Path | None = None,
              stamp: str = "", profile: bool = True, repeats: int = 3) -> dict[str, Any]:
    assert env.admin is not None and env.subscriber is not None
    names = ["throughput-warm", *(f"throughput-{i}" for i in range(repeats)), "throughput-profile"]
    topics = await env.chunk_topics([("bench-user", n) for n in names])
    await _stream(env, names[0], topics[0], 200)  # warm-up: imports, connections, topic known
    runs, bases = [], []
    for i in range(repeats):  # alternated, so a change of the machine's pace moves both alike
        ours = await _stream(env, names[1 + i], topics[1 + i], tokens)
        records = [orjson.dumps(r.chunk) for r in ours.pop("records")]
        runs.append(ours)
        bases.append(await raw_throughput(bootstrap=env.bootstrap, admin=env.admin, subscriber=env.subscriber,
                                          topic=f"{env.prefix}.raw-throughput-{i}", records=records))
    median = sorted(runs, key=lambda r: r["chunks_per_s"])[len(runs) // 2]  # its CPU per chunk and the rest
    base_cps = statistics.median(b["chunks_per_s"] for b in bases)
    out: dict[str, Any] = {
        "conditions": {"tokens": tokens, "processors": "3 pass-through process_output_stream",
                       "model_chunk_delay_s": 0, "instances": "1 per service", "chunk_topic_partitions": 1,
                       "record_bytes": median["delta_record_bytes"], "repeats": repeats,
                       "baseline": f"same records, one aiokafka producer process (linger {relay_linger_ms()} ms as the "
                                   "services', acks=all) → same subscriber; alternated with Threadline's runs"},
        "threadline": {**median, "runs_chunks_per_s": [r["chunks_per_s"] for r in runs]},
        "baseline": {"chunks_per_s": round(base_cps, 1),
                     "runs_chunks_per_s": [round(b["chunks_per_s"], 1) for b in bases],
                     "records": bases[0]["records"], "batches": [b["batches"] for b in bases],
                     "first_batch": [b["first_batch"] for b in bases]},
        "ratio": ratio(median["chunks_per_s"], base_cps),
        "pair_ratios": [ratio(r["chunks_per_s"], b["chunks_per_s"]) for r, b in zip(runs, bases, strict=True)],
        "target": {"chunks_per_s": 20_000, "ratio_min": 0.5},
    }
    if profile and profile_dir is not None:
        spy = PySpy(env.worker_pids()[0], profile_dir / f"{stamp}-throughput-processor_worker.collapsed.txt")
        if spy.start():
            again = await _stream(env, names[-1], topics[-1], tokens)
            again.pop("records")
            path = spy.stop()
            out["profile"] = {"run": again, "file": path.name if path else None,
                              **(top_costs(path, 12) if path else {})}
    return out

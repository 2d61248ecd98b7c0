"""Figures 3 and 5: concurrent streaming runs, and the same with two processor-workers.

``n`` runs start at once on ``n`` threads; each streams ``tokens`` tokens at ``rate`` tokens/s
(the fake model sleeps ``1/rate`` s between chunks). At the subscriber (one consumer for all
threads), per run: the gaps between consecutive ``text-delta`` chunks minus the model's own gap
are the *added inter-chunk delay* (p50/p99 over all gaps of all runs), and the run's stream
length beyond ``(tokens-1)/rate`` spread over its gaps is the *added delay per chunk*.
Worker CPU is its CPU seconds over the wall time from the first send to the last ``finish``;
memory per run is (peak RSS during the runs − RSS of the fresh, warmed-up idle worker) / n.
The workers are restarted before each size, so RSS readings never carry over.

Whether the subscriber kept up: its process CPU share over the window, and the lag of each
record (receive time − Kafka create time) at p50/p99; a subscriber that fell behind would show
a lag growing to seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import orjson

from bench.env import BenchEnv
from bench.procstat import PySpy, RssPeak, cpu_seconds, rss_bytes, top_costs
from bench.stats import all_records, log_segments, pct, ratio, summary_ms
from bench.subscriber import is_type
from threadline.worker.step_gap import START_SEGMENTS

AGENT = "bench-concurrency"
MODEL = "threadline-bench-concurrency"
MB = 1024 * 1024


async def _batch(env: BenchEnv, threads: list[str], topics: list[str], tokens: int, rate: float) -> dict[str, Any]:
    assert env.client is not None and env.subscriber is not None and env.script is not None
    sub = env.subscriber
    n = len(threads)
    await env.script.aqueue({"chunks": [f"w{i} " for i in range(tokens)], "chunk_delay": 1 / rate, "times": n},
                            model=MODEL)
    starts = {t: len(sub.by_topic[t]) for t in topics}
    sub.lag_ms.clear()
    pids = env.worker_pids()
    db_t0 = await _db_now(env)
    timeouts0 = _pool_timeouts(env)
    cpu0 = {p: cpu_seconds(p) for p in pids}
    others = service_pids(env)
    other_cpu0 = {name: cpu_seconds(p) for name, p in others.items()}
    sub_cpu0 = time.process_time()
    idle = {p: rss_bytes(p) for p in pids}
    async with RssPeak(pids) as rss:
        t0 = time.perf_counter()
        sent = await asyncio.gather(*(env.client.send_message("Stream, please.", agent_id=AGENT,
                                                              resource_id="bench-user", thread_id=t) for t in threads))
        await asyncio.gather(*(s.accepted for s in sent))
        await asyncio.gather(*(sub.wait(topic, is_type("finish"), start=starts[topic], timeout_s=900)
                               for topic in topics))
        t_end = time.perf_counter()
    wall = t_end - t0
    gaps, per_chunk, first, counts, failed = [], [], [], 0, 0
    step = 1 / rate
    for topic in topics:
        got = sub.by_topic[topic][starts[topic]:]
        deltas = [r.t for r in got if r.chunk.get("type") == "text-delta"]
        counts += len(deltas)
        if len(deltas) < tokens or any(r.chunk.get("type") == "error" for r in got):
            failed += 1  # counted, and kept out of the delays
            continue
        first.append(deltas[0] - t0)
        gaps += [(b - a - step) * 1000 for a, b in itertools.pairwise(deltas)]
        per_chunk.append((deltas[-1] - deltas[0] - (len(deltas) - 1) * step) / max(1, len(deltas) - 1) * 1000)
    lag = list(sub.lag_ms)
    worker_cpu = sum(cpu_seconds(p) - cpu0[p] for p in pids)
    service_cpu = {"processor_worker": worker_cpu,
                   **{name: cpu_seconds(p) - other_cpu0[name] for name, p in others.items()}}
    stored = await _stored_runs(env, threads, db_t0)
    return {
        "runs": n, "failed_runs": failed, "text_deltas": counts, "wall_s": round(wall, 2),
        "stored": stored, "pool_timeouts_in_worker_logs": _pool_timeouts(env) - timeouts0,
        "chunks_per_s": round(counts / wall, 1),
        "ideal_wall_s": round((tokens - 1) / rate, 2),
        "added_gap_ms": {"p50": round(pct(gaps, 50), 2), "p99": round(pct(gaps, 99), 2)},
        "added_per_chunk_ms": {"p50": round(pct(per_chunk, 50), 2), "p99": round(pct(per_chunk, 99), 2)},
        "first_delta_ms": {"p50": round(pct(first, 50) * 1000, 1), "p99": round(pct(first, 99) * 1000, 1)},
        "worker_cpu_cores": round(worker_cpu / wall, 2),
        # CPU seconds per run (one step each: the agent has no tools) and per chunk, by process
        "cpu_ms_per_step": {k: round(1000 * v / n, 2) for k, v in service_cpu.items()},
        "cpu_ms_per_chunk": {k: round(1000 * v / max(1, counts), 3) for k, v in service_cpu.items()},
        "worker_rss_idle_mb": round(sum(idle.values()) / MB, 1),
        "worker_rss_peak_mb": round(sum(rss.peak.values()) / MB, 1),
        "worker_rss_peak_each_mb": round(max(rss.peak.values()) / MB, 1),
        "rss_per_run_kb": round(sum(rss.peak[p] - idle[p] for p in pids) / n / 1024, 1),
        "subscriber": {"cpu_share": round((time.process_time() - sub_cpu0) / wall, 2),
                       "record_lag_ms": {"p50": round(pct(lag, 50), 1), "p99": round(pct(lag, 99), 1)}},
    }


def service_pids(env: BenchEnv) -> dict[str, int]:
    """The other services' first instances and the native broker (CPU per step, docs/capacity.md)."""
    from bench.topics import broker_pid

    out = {}
    for name in ("ingress", "run_orchestrator", "notification_scheduler"):
        try:
            out[name] = env.pid(f"{name}-1")
        except Exception:  # noqa: BLE001 - a service set without it: left out of the reading
            continue
    if (kafka := broker_pid()) is not None:
        out["kafka_broker"] = kafka
    return out


async def _db_now(env: BenchEnv) -> Any:
    import asyncpg

    conn = await asyncpg.connect(env.dsn)
    try:
        return await conn.fetchval("SELECT now()")
    finally:
        await conn.close()


async def _stored_runs(env: BenchEnv, threads: list[str], since: Any) -> dict[str, int]:
    """What PostgreSQL says about the batch's runs once none is ``running`` any more (a run's
    ``finish`` chunk reaches the subscriber just before its step is stored; at most 60 s): how
    many, how many did not finish, and the re-executed steps (a step claimed again under a new
    attempt: ``attempt > 1``; the bench's agents have no processors, so no processor retry raises
    it)."""
    import asyncpg

    conn = await asyncpg.connect(env.dsn)
    try:
        for _ in range(600):
            row = await conn.fetchrow(
                "SELECT count(*) AS runs, count(*) FILTER (WHERE status = 'running') AS still_running, "
                "count(*) FILTER (WHERE status NOT IN ('running', 'finished')) AS not_finished, "
                "count(*) FILTER (WHERE attempt > 1) AS runs_with_re_executed_step, "
                "coalesce(sum(attempt - 1), 0) AS re_executed_steps "
                "FROM runs WHERE thread_id = ANY($1::text[]) AND created_at >= $2", threads, since)
            if row["still_running"] == 0:
                break
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
    return {k: int(v) for k, v in dict(row).items()}


def _pool_timeouts(env: BenchEnv) -> int:
    """``PoolTimeoutError`` lines in the processor-workers' logs so far."""
    return sum(f.read_text(errors="replace").count("PoolTimeoutError")
               for f in env.log_dir.glob("processor_worker*"))


async def burst(env: BenchEnv, *, runs: int = 500, workers: int = 1, tokens: int = 200, rate: float = 50,
                profile_dir: Path | None = None, stamp: str = "") -> dict[str, Any]:
    """The burst figure: ``runs`` runs started at once on ``workers`` fresh workers (threads of
    their own, ``burst-<i>`` for one worker, ``burst<workers>w-<i>`` else); failed runs,
    re-executed steps (from the runs table) and pool timeouts (from the workers' logs) counted;
    worker CPU and RSS are the sums over the workers; ``start_split_ms`` splits the first tokens
    (:func:`_start_split`) and, with one worker, ``worker_step_start_ms`` holds its ``step start``
    lines of the burst (claim, setup, model open). With ``profile_dir`` (one worker only), a
    second burst on the same threads runs under py-spy (the figures come from the first,
    unprofiled one) and its collapsed stacks are written there."""
    prefix = "burst" if workers == 1 else f"burst{workers}w"
    names = [f"{prefix}-{i}" for i in range(runs)]
    topics = await env.chunk_topics([("bench-user", t) for t in [*names, f"warm-{prefix}"]])
    await _fresh_workers(env, workers, topics[-1], prefix)
    assert env.subscriber is not None
    starts = {t: len(env.subscriber.by_topic[t]) for t in topics[:-1]}
    log = env.log_dir / f"{env.workers[0]}.log"  # read with one worker only
    log_from = log.stat().st_size if log.exists() else 0
    out = await _batch(env, names, topics[:-1], tokens, rate)
    out["workers"] = workers
    out["start_split_ms"] = await _start_split(env, dict(zip(names, topics[:-1], strict=True)), starts)
    if workers == 1:  # the worker's own ``step start`` lines of the burst's runs
        out["worker_step_start_ms"] = log_segments(log, log_from, "step start", START_SEGMENTS)
    if workers != 1:
        profile_dir = None
    if profile_dir is not None:
        spy = PySpy(env.worker_pids()[0], profile_dir / f"{stamp}-burst-processor_worker.collapsed.txt")
        if spy.start():
            try:
                again = await _batch(env, names, topics[:-1], tokens, rate)
            finally:
                path = spy.stop()
            out["profile"] = {"wall_s": again["wall_s"], "file": path.name if path else None,
                              **(top_costs(path, 12) if path else {})}
    out["wall_ratio_to_ideal"] = ratio(out["wall_s"], out["ideal_wall_s"])
    out["broker_settle_s"] = env.settle_s  # waited at the start for an earlier bench's topic removal
    out["target"] = {"failed_runs": 0, "re_executed_steps": 0, "first_token_p99_ms": 1000, "wall_ratio_max": 1.25,
                     "added_gap_p99_ms": 50}
    return out


async def _start_split(env: BenchEnv, topic_of: dict[str, str], starts: dict[str, int]) -> dict[str, Any]:
    """Where a burst's first tokens went, per run from the records' Kafka timestamps (the
    producers' create times, ms, one machine's clock): the request produced → the step task
    produced (ingress: its turn, its statement, its outbox), → the first ``text-delta`` produced
    (the worker: the hop, the claim, the model call), → received by the subscriber. Only the
    first request and step task of each of the burst's threads count (a profiled second burst
    reuses them)."""
    assert env.subscriber is not None
    firsts: dict[str, dict[str, float]] = {"request": {}, "step_task": {}}
    for kind, topic in (("request", env.topics.ingress), ("step_task", env.topics.step_tasks)):
        for r in await all_records(env.bootstrap, topic):
            body = orjson.loads(r.value) if r.value else None
            if isinstance(body, dict) and body.get("thread_id") in topic_of:
                firsts[kind].setdefault(body["thread_id"], r.timestamp)
    split: dict[str, list[float]] = {"request_to_step_task": [], "step_task_to_first_text": [],
                                     "first_text_produced_to_received": []}
    for thread, topic in topic_of.items():
        got = env.subscriber.by_topic[topic][starts[topic]:]
        text = next((r for r in got if r.chunk.get("type") == "text-delta"), None)
        req, task = firsts["request"].get(thread), firsts["step_task"].get(thread)
        if text is None or req is None or task is None:
            continue
        split["request_to_step_task"].append((task - req) / 1000)
        split["step_task_to_first_text"].append((text.ts_ms - task) / 1000)
        split["first_text_produced_to_received"].append((text.wall_ms - text.ts_ms) / 1000)
    return {k: summary_ms(v) for k, v in split.items()}


async def _fresh_workers(env: BenchEnv, count: int, warm_topic: str, tag: str) -> None:
    """Restart the workers and run one short stream through them (imports, connections)."""
    assert env.client is not None and env.subscriber is not None and env.script is not None
    await env.set_workers(count)
    await asyncio.sleep(2)  # let the group settle before timing
    await _batch(env, [f"warm-{tag}"], [warm_topic], 20, 1000)


async def run(env: BenchEnv, *, sizes: tuple[int, ...] = (100, 300, 500), tokens: int = 200, rate: float = 50,
              scaling_size: int = 300) -> dict[str, Any]:
    biggest = max([*sizes, scaling_size])
    names = [f"conc-{i}" for i in range(biggest)]
    warm = list(dict.fromkeys(f"warm-{s}" for s in (*sizes, "x1", "x2")))
    topics = await env.chunk_topics([("bench-user", t) for t in names + warm])
    topic_of = dict(zip(names + warm, topics, strict=True))
    results = []
    for size in sizes:
        await _fresh_workers(env, 1, topic_of[f"warm-{size}"], str(size))
        threads = names[:size]
        results.append(await _batch(env, threads, [topic_of[t] for t in threads], tokens, rate))
    one = next((r for r in results if r["runs"] == scaling_size), None)
    await _fresh_workers(env, 2, topic_of["warm-x2"], "x2")
    threads = names[:scaling_size]
    two = await _batch(env, threads, [topic_of[t] for t in threads], tokens, rate)
    if one is None:
        await _fresh_workers(env, 1, topic_of["warm-x1"], "x1")
        one = await _batch(env, threads, [topic_of[t] for t in threads], tokens, rate)
    await env.set_workers(1)
    return {
        "concurrency": {
            "conditions": {"tokens_per_run": tokens, "tokens_per_s": rate, "agent": "no processors",
                           "instances": "1 per service", "partitions_internal_topics": env.partitions,
                           "chunk_topics": "one per thread, 1 partition",
                           "subscriber": "one aiokafka consumer assigned every thread's chunk topic"},
            "sizes": results, "target": {"runs": 500, "added_gap_p99_ms": 50, "rss_total_mb": 400,
                                         "rss_per_run_kb": 256}},
        "scaling": {
            "conditions": {"runs": scaling_size, "tokens_per_run": tokens, "tokens_per_s": rate,
                           "partitions_step_tasks": env.partitions, "machine_cores": _cores(),
                           "note": "all services, Kafka, PostgreSQL, the model server and the subscriber share the cores"},
            "one_worker": one, "two_workers": two,
            "throughput_ratio": ratio(two["chunks_per_s"], one["chunks_per_s"]), "target": {"ratio_min": 1.8}},
    }


def _cores() -> int:
    import os

    return os.cpu_count() or 0

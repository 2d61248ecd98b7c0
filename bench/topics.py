"""Figure ``topics``: per-thread chunk topics at scale (docs/decisions.md 40-42) on the one local broker.

Creates ``N`` thread topics (default 10,000) under the bench prefix and measures

* creation rate, topics/s (a 5 s settle after each batched phase, so the probes measure a broker
  at rest): one by one through :meth:`TopicAdmin.ensure_chunk_topic` (one
  ``CreateTopics`` request per topic, then a wait for its leader, as a worker/ingress/client does
  for a thread it has not seen) and in batches of ``BATCH`` names per request (as
  ``TopicAdmin.ensure`` does for a list, e.g. ``BenchEnv.chunk_topics``), both as accepted by
  the controller and until the batch's last topic has a leader (the logs are created after);
* the broker's RSS, open file descriptors and memory maps before and after (``/proc/<pid>``);
* the latency of ``ensure_chunk_topic`` for a brand-new topic and of one topic's metadata
  (``describe_topics``) at 0, N/2 and N existing bench topics;
* subscriber start-up: ``subscribe_to_thread`` of a new thread (topic creation included), then
  ``send_message`` → the first live chunk at that subscription, at 0 and at N topics.

The bench prefix's topics are deleted afterwards (``BenchEnv.stop``); the deletion time is
measured too. Broker pid: ``deploy/native/kafka.sh status``.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from bench.env import ROOT, BenchEnv, delete_topics
from bench.ttfc import subscribed_run
from threadline.kafka.admin import TopicAdmin, chunk_topic_config

BATCH = 200
"""Names per ``CreateTopics`` request in the batched phase (``BenchEnv.chunk_topics`` uses 200)."""
ONE_BY_ONE = 300
"""Topics created one by one (each phase of one-by-one creation), the rest in batches."""
PROBES = 15
"""New topics timed at each probe point."""
RETENTION_MS = 7 * 24 * 3600 * 1000


def broker_pid() -> int | None:
    """The native broker's pid from ``deploy/native/kafka.sh status`` (None when not native)."""
    out = subprocess.run(["bash", str(ROOT / "deploy/native/kafka.sh"), "status"], capture_output=True,
                         text=True, check=False).stdout.split()
    return int(out[1]) if len(out) > 2 and out[1].isdigit() else None


def heap_after_gc_mb(pid: int) -> float | None:
    """The broker JVM's used heap right after a full GC (``jcmd GC.run``, ``GC.heap_info``), in
    MB: what its topics really hold (the RSS keeps the heap the JVM grew to); None without jcmd."""
    try:
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=60, check=True)
        info = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60,
                              check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"heap\s+total \d+K, used (\d+)K", info)
    return round(int(found.group(1)) / 1024, 1) if found else None


def broker_state(pid: int | None) -> dict[str, Any]:
    """RSS (MB), used heap after a full GC (MB), open fds and memory maps of the broker process."""
    if pid is None:
        return {}
    heap = heap_after_gc_mb(pid)
    proc = Path(f"/proc/{pid}")
    rss_kb = next(int(line.split()[1]) for line in (proc / "status").read_text().splitlines()
                  if line.startswith("VmRSS"))
    return {"rss_mb": round(rss_kb / 1024, 1), "heap_used_after_gc_mb": heap,
            "open_fds": len(list((proc / "fd").iterdir())), "maps": len((proc / "maps").read_text().splitlines())}


def _ms(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"p50": round(1000 * statistics.median(xs), 1), "p95": round(1000 * xs[int(0.95 * (len(xs) - 1))], 1),
            "max": round(1000 * xs[-1], 1), "n": len(xs)}


async def _probe(env: BenchEnv, existing: int, tag: str) -> dict[str, Any]:
    """``ensure_chunk_topic`` of PROBES new topics (a fresh admin each: no cache) and metadata of one."""
    admin = TopicAdmin(env.bootstrap)
    await admin.start()
    meta = AIOKafkaAdminClient(bootstrap_servers=env.bootstrap)
    await meta.start()
    try:
        ensure, describe = [], []
        for i in range(PROBES):
            name = env.topics.chunks("bench-probe", f"{tag}-{i}")
            t0 = time.perf_counter()
            await admin.ensure_chunk_topic(name, retention_ms=RETENTION_MS)
            ensure.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await meta.describe_topics([name])
            describe.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        total = len(await meta.list_topics())
        list_s = time.perf_counter() - t0
    finally:
        await meta.close()
        await admin.stop()
    return {"existing_bench_topics": existing, "broker_topics": total, "ensure_chunk_topic_ms": _ms(ensure),
            "describe_topic_ms": _ms(describe), "list_topics_ms": round(1000 * list_s, 1)}


async def _one_by_one(env: BenchEnv, names: list[str]) -> float:
    """Create ``names`` one by one as ``ensure_chunk_topic`` does; returns topics/s."""
    assert env.admin is not None
    t0 = time.perf_counter()
    for name in names:
        await env.admin.ensure_chunk_topic(name, retention_ms=RETENTION_MS)
    return len(names) / (time.perf_counter() - t0)


async def _batched(env: BenchEnv, names: list[str]) -> tuple[float, float]:
    """Create ``names`` in requests of BATCH names; returns topics/s accepted by the controller
    and topics/s until the last one has a leader (the broker creates the logs after accepting)."""
    assert env.admin is not None
    t0 = time.perf_counter()
    for i in range(0, len(names), BATCH):
        await env.admin.ensure(names[i:i + BATCH], partitions=1, config=chunk_topic_config(RETENTION_MS))
    accepted = time.perf_counter() - t0
    meta = AIOKafkaAdminClient(bootstrap_servers=env.bootstrap)
    await meta.start()
    try:
        async with asyncio.timeout(600):
            while True:
                got = await meta.describe_topics([names[-1]])
                parts = got[0].get("partitions") if got else None
                if parts and all(p.get("leader", -1) >= 0 for p in parts):
                    break
                await asyncio.sleep(0.05)
    finally:
        await meta.close()
    return len(names) / accepted, len(names) / (time.perf_counter() - t0)


async def _startup(env: BenchEnv, tag: str, samples: int) -> dict[str, Any]:
    """subscribe_to_thread on a new thread, then a run: subscribe time and subscribe → first live chunk."""
    runs = [await subscribed_run(env, f"startup-{tag}-{i}", "hello", timeout_s=60) for i in range(samples)]
    return {"subscribe_ms": _ms([r.subscribe_s for r in runs]),
            "subscribe_to_first_live_chunk_ms": _ms([r.first_chunk_s for r in runs])}


async def run(env: BenchEnv, *, topics: int = 10_000, startup_samples: int = 10) -> dict[str, Any]:
    """The figure; ``topics`` bench topics are created (and deleted by ``env.stop``)."""
    pid = broker_pid()
    before = broker_state(pid)
    probes = [await _probe(env, 0, "p0")]
    startup0 = await _startup(env, "t0", startup_samples)
    names = [env.topics.chunks("bench-scale", f"thread-{i}") for i in range(topics)]
    half = topics // 2
    rates: dict[str, float] = {"one_by_one_at_0": round(await _one_by_one(env, names[:ONE_BY_ONE]), 1)}
    for label, part in (("to_half", names[ONE_BY_ONE:half]), ("to_full", names[half:topics - ONE_BY_ONE])):
        accepted, usable = await _batched(env, part)
        rates[f"batched_{label}_accepted"], rates[f"batched_{label}_with_leader"] = round(accepted, 1), round(usable, 1)
        await asyncio.sleep(5)  # settle: the probes measure a broker at rest
        if label == "to_half":
            probes.append(await _probe(env, half, "p5k"))
    rates["one_by_one_at_full"] = round(await _one_by_one(env, names[topics - ONE_BY_ONE:]), 1)
    probes.append(await _probe(env, topics, "p10k"))
    after = broker_state(pid)
    startup = await _startup(env, "t10k", startup_samples)
    t0 = time.perf_counter()
    deleted = await delete_topics(env.bootstrap, env.prefix + ".chunks.")
    delete_s = time.perf_counter() - t0
    await asyncio.sleep(10)  # the broker removes the logs asynchronously (file.delete.delay.ms)
    cleaned = broker_state(pid)
    return {
        "conditions": {"topics": topics, "batch": BATCH, "one_by_one_per_phase": ONE_BY_ONE,
                       "partitions_per_topic": 1, "replication": 1, "probes_per_point": PROBES,
                       "broker": "one native KRaft broker+controller, -Xmx768m",
                       "note": "the broker also holds the topics other sessions/tests left (broker_topics)"},
        "creation_topics_per_s": rates,
        "broker_before": before, "broker_after": after, "broker_10s_after_deletion": cleaned,
        "deletion": {"topics": deleted, "seconds": round(delete_s, 1),
                     "topics_per_s": round(deleted / delete_s, 1) if delete_s else None},
        "probes": probes,
        "subscriber_startup_at_0": startup0, "subscriber_startup_at_full": startup,
    }

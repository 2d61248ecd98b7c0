"""Many open streams in one process: a Kafka consumer per subscription (``own``, the client's
default) against one fan-out reader (``shared``, :mod:`threadline.kafka.fanout`, what the gateway
uses), side by side in the same run.

    python -m bench.fanout_streams                      # 1,000 idle streams + 1 live, own then shared
    python -m bench.fanout_streams --streams 200 --rounds 2

Each block runs in a fresh process (so the memory one leaves behind does not hide the other's):
it opens ``--streams`` :class:`~threadline.client.subscription.ThreadSubscription` on idle topics
and one on a live topic, each read by a task, and reports: the process's RSS growth per open
stream (KiB), its Kafka consumers and established connections to the broker, the CPU seconds the
broker and the process spent over ``--idle-s`` with every stream idle, and produce → delivered
p50 / p99 (ms) at the live stream for ``--records`` chunks ``--gap-ms`` apart. Uses the local
cluster (``make infra-up`` first if it is down); makes its topics once and removes them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from bench.env import ROOT
from bench.procstat import cpu_seconds
from bench.stats import summary_ms
from bench.topics import broker_pid
from threadline.client.subscription import ThreadSubscription
from threadline.kafka.admin import TopicAdmin
from threadline.kafka.fanout import FanoutReader
from threadline.testing.harness import ensure_native_cluster

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _sockets(pid: int | str) -> set[str]:
    """The socket inodes process ``pid`` holds open."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    return inodes


def _tcp(pid: int | str = "self") -> list[list[str]]:
    rows = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            rows += [line.split() for line in f.read().splitlines()[1:]]
    return rows


def _ports(bootstrap: str) -> set[int]:
    return {int(addr.rsplit(":", 1)[1]) for addr in bootstrap.split(",")}


def broker_connections(pid: int, bootstrap: str) -> int:
    """Established TCP connections of process ``pid`` to the ports of ``bootstrap`` (``/proc``)."""
    ports, inodes = _ports(bootstrap), _sockets(pid)
    return sum(1 for c in _tcp(pid) if c[9] in inodes and c[3] == "01" and int(c[2].rsplit(":", 1)[1], 16) in ports)


def listener_pid(bootstrap: str) -> int | None:
    """The process listening on ``bootstrap``'s port (the broker, wherever it was started from)."""
    ports = _ports(bootstrap)
    listening = {c[9] for c in _tcp() if c[3] == "0A" and int(c[1].rsplit(":", 1)[1], 16) in ports}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if listening & _sockets(pid):
            return int(pid)
    return None


def _rss_kib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 1024


async def _block(bootstrap: str, mode: str, topics: list[str], *, idle_s: float, records: int,
                 gap_ms: float) -> dict[str, Any]:
    reader = FanoutReader(bootstrap, consumers=2) if mode == "shared" else None
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    gc.collect()
    base_rss, base_conns = _rss_kib(), broker_connections(os.getpid(), bootstrap)
    subs = [ThreadSubscription(bootstrap, t, reader=reader) for t in topics]
    opened = time.monotonic()
    for i in range(0, len(subs), 50):
        await asyncio.gather(*(s.start() for s in subs[i:i + 50]))
    open_s = time.monotonic() - opened
    received: dict[int, float] = {}
    tag = uuid.uuid4().hex[:8]

    async def read(sub: ThreadSubscription) -> None:
        async for chunk in sub.stream:
            received[chunk["seq"]] = time.perf_counter()
            if chunk["seq"] == records - 1:
                return

    tasks = [asyncio.create_task(read(s)) for s in subs]
    broker = broker_pid() or listener_pid(bootstrap)
    try:
        await asyncio.sleep(2.0)  # every consumer past its first fetch
        gc.collect()
        rss, conns = _rss_kib(), broker_connections(os.getpid(), bootstrap)
        broker_from, own_from = cpu_seconds(broker) if broker else 0.0, time.process_time()
        await asyncio.sleep(idle_s)
        idle = {"broker_cpu_s": round(cpu_seconds(broker) - broker_from, 2) if broker else None,
                "process_cpu_s": round(time.process_time() - own_from, 2)}
        sent: dict[int, float] = {}
        for seq in range(records):
            sent[seq] = time.perf_counter()
            await producer.send(topics[0], orjson.dumps({"runId": f"run-{tag}", "seq": seq, "type": "text-delta"}),
                                partition=0)
            await asyncio.sleep(gap_ms / 1000)
        await asyncio.wait_for(tasks[0], 60)
    finally:
        for task in tasks:
            task.cancel()
        for sub in subs:
            await sub.unsubscribe()
        if reader is not None:
            await reader.stop()
        await producer.stop()
    return {"mode": mode, "streams": len(subs), "consumers": reader.consumers if reader else len(subs),
            "broker_connections": conns, "broker_connections_before": base_conns, "open_s": round(open_s, 1),
            "rss_mib": round((rss - base_rss) / 1024, 1),
            "rss_kib_per_stream": round((rss - base_rss) / len(subs), 1), f"idle_{idle_s:g}s": idle,
            "delivered_ms": summary_ms([received[s] - sent[s] for s in range(records)])}


def _child(args: argparse.Namespace, mode: str, topics: list[str], bootstrap: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.fanout_streams", "--one", mode, "--bootstrap", bootstrap,
           "--idle-s", str(args.idle_s), "--records", str(args.records), "--gap-ms", str(args.gap_ms)]
    out = subprocess.run(cmd, input="\n".join(topics), capture_output=True, text=True, cwd=ROOT, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.one is not None:
        topics = sys.stdin.read().split()
        block = await _block(args.bootstrap, args.one, topics, idle_s=args.idle_s, records=args.records,
                             gap_ms=args.gap_ms)
        print(json.dumps(block), flush=True)
        return [block]
    cluster = ensure_native_cluster(ROOT)
    topics = [f"tlbench-fan-{uuid.uuid4().hex[:8]}-{i}" for i in range(args.streams + 1)]
    admin = TopicAdmin(cluster.bootstrap)
    await admin.start()
    out = []
    try:
        for i in range(0, len(topics), 200):
            await admin.ensure(topics[i:i + 200], partitions=1)
        for _ in range(args.rounds):
            for mode in ("own", "shared"):
                block = await asyncio.to_thread(_child, args, mode, topics, cluster.bootstrap)
                print(json.dumps(block), flush=True)
                out.append(block)
    finally:
        await admin.delete_and_wait(topics, timeout_s=120)
        await admin.stop()
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.fanout_streams", description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=1000, help="idle streams besides the live one (default 1000)")
    p.add_argument("--records", type=int, default=200, help="chunks to the live stream (default 200)")
    p.add_argument("--gap-ms", type=float, default=20.0, help="between two chunks (default 20 ms)")
    p.add_argument("--idle-s", type=float, default=5.0, help="the idle window measured (default 5 s)")
    p.add_argument("--rounds", type=int, default=1, help="times each mode runs (default 1)")
    p.add_argument("--one", choices=("own", "shared"), help=argparse.SUPPRESS)  # a block, in a child
    p.add_argument("--bootstrap", help=argparse.SUPPRESS)
    return p


if __name__ == "__main__":
    asyncio.run(main(_parser().parse_args()))

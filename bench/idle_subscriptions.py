"""Open subscriptions at rest: what ``subscribe_to_thread`` consumers cost the broker while their
threads are idle, and how soon one of them gets a chunk, with the fetch wait of
:data:`threadline.client.subscription.IDLE_FETCH_WAIT_MS` beside another one.

    python -m bench.idle_subscriptions                          # 50 idle + 1 live, 10 vs 500 ms, 2 rounds
    python -m bench.idle_subscriptions --idle 200 --waits 500 --rounds 1

Each block: ``--idle`` subscriptions on threads that say nothing and one on a thread that gets
``--records`` chunks ``--gap-ms`` apart, all :class:`~threadline.client.subscription.ThreadSubscription`
with the block's ``fetch_max_wait_ms``. Figures per block: produce → delivered at the live
subscription p50 / p90 / p99 (ms), and the CPU seconds the broker and this process spent over the
records' window (``/proc``; the native broker's pid from ``deploy/native/kafka.sh status``). Waits
alternate, so a drift of the shared machine falls on both. Uses the local cluster (``make
infra-up`` first if it is down) and removes its topics.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any
from unittest import mock

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from bench.env import ROOT
from bench.procstat import cpu_seconds
from bench.stats import summary_ms
from bench.topics import broker_pid
from threadline.client import subscription
from threadline.kafka.admin import TopicAdmin
from threadline.testing.harness import ensure_native_cluster


@contextlib.contextmanager
def _fetch_wait(ms: int) -> Iterator[None]:
    """Subscriptions made inside use ``fetch_max_wait_ms=ms``."""
    def consumer(*args: Any, **kw: Any) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(*args, **{**kw, "fetch_max_wait_ms": ms})

    with mock.patch.object(subscription, "AIOKafkaConsumer", consumer):
        yield


async def _block(bootstrap: str, *, wait_ms: int, idle: int, records: int, gap_ms: float) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    topics = [f"tlbench-idle-{tag}-{i}" for i in range(idle + 1)]
    admin = TopicAdmin(bootstrap)
    await admin.start()
    await admin.ensure(topics, partitions=1)  # and their leaders known
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    with _fetch_wait(wait_ms):
        subs = [subscription.ThreadSubscription(bootstrap, t) for t in topics]
        for sub in subs:
            await sub.start()
    received: dict[int, float] = {}

    async def read(sub: subscription.ThreadSubscription) -> None:
        async for chunk in sub.stream:
            received[chunk["seq"]] = time.perf_counter()
            if chunk["seq"] == records - 1:
                return

    readers = [asyncio.create_task(read(sub)) for sub in subs]  # the idle ones wait on their fetches
    broker = broker_pid()
    try:
        await asyncio.sleep(1.0)  # every consumer past its first fetch
        broker_from, own_from, started = cpu_seconds(broker) if broker else 0.0, time.process_time(), time.monotonic()
        sent: dict[int, float] = {}
        for seq in range(records):
            sent[seq] = time.perf_counter()
            await producer.send(topics[0], orjson.dumps({"runId": f"run-{tag}", "seq": seq, "type": "text-delta"}),
                                partition=0)
            await asyncio.sleep(gap_ms / 1000)
        await asyncio.wait_for(readers[0], 30)
        window = time.monotonic() - started
        broker_s = (cpu_seconds(broker) - broker_from) if broker else None
        own_s = time.process_time() - own_from
    finally:
        for task in readers:
            task.cancel()
        for sub in subs:
            await sub.unsubscribe()
        await producer.stop()
        await admin.delete_and_wait(topics)
        await admin.stop()
    latency = summary_ms([received[s] - sent[s] for s in range(records)])
    return {"fetch_max_wait_ms": wait_ms, "subscriptions": idle + 1, "delivered_ms": latency,
            "window_s": round(window, 2), "broker_cpu_s": None if broker_s is None else round(broker_s, 2),
            "client_cpu_s": round(own_s, 2)}


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    cluster = ensure_native_cluster(ROOT)
    out = []
    for _ in range(args.rounds):
        for wait_ms in args.waits:
            block = await _block(cluster.bootstrap, wait_ms=wait_ms, idle=args.idle, records=args.records,
                                 gap_ms=args.gap_ms)
            print(json.dumps(block), flush=True)
            out.append(block)
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.idle_subscriptions", description=__doc__.split("\n\n")[0])
    p.add_argument("--idle", type=int, default=50, help="subscriptions on idle threads (default 50)")
    p.add_argument("--records", type=int, default=200, help="chunks to the live thread (default 200)")
    p.add_argument("--gap-ms", type=float, default=20.0, help="between two chunks (default 20 ms)")
    p.add_argument("--waits", type=lambda s: [int(x) for x in s.split(",")], default=[10, 500],
                   help="fetch_max_wait_ms values, alternated (default 10,500)")
    p.add_argument("--rounds", type=int, default=2, help="times each wait runs (default 2)")
    return p


if __name__ == "__main__":
    asyncio.run(main(_parser().parse_args()))

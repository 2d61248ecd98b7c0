"""Baselines on bare aiokafka, measured in the same run as the Threadline figures.

* ``relay``: a process that consumes one topic (in a consumer group, like a service) and
  produces each record to the next topic, re-sized to the size of the record Threadline sends on
  that hop. Three relays chained over four topics are the same number of Kafka hops as
  ``send_message`` → ingress → run-orchestrator → processor-worker → chunk topic, without
  Postgres, processors or a model.
* ``produce``: a process that produces given records to a topic as fast as aiokafka allows.

Both use the producer settings of Threadline's services (acks=all, idempotent, 256 KiB batches,
the services' ``THREADLINE_KAFKA_LINGER_MS``, 0 by default), so the comparison is about what
Threadline adds, not about tuning.

    python -m bench.rawkafka relay --bootstrap B --src S --dst D --group G --size N
    python -m bench.rawkafka produce --bootstrap B --topic T --file F
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from bench.stats import arrival_rate
from bench.subscriber import ChunkSubscriber
from threadline.config import get_settings
from threadline.kafka.admin import TopicAdmin
from threadline.testing.harness import stop_process


def relay_linger_ms() -> int:
    """The linger of the baselines' producers: the services' own (``THREADLINE_KAFKA_LINGER_MS``)."""
    return get_settings().kafka_linger_ms


def _producer(bootstrap: str, linger_ms: int | None = None) -> AIOKafkaProducer:
    linger_ms = relay_linger_ms() if linger_ms is None else linger_ms
    return AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=linger_ms,
                            max_batch_size=256 * 1024, max_request_size=4 * 1024 * 1024)


def payload(i: int, size: int) -> bytes:
    """A JSON record of exactly ``size`` bytes (at least its header) carrying ``i``."""
    head = b'{"i":%d,"pad":"' % i
    return head + b"x" * max(0, size - len(head) - 2) + b'"}'


async def _relay(bootstrap: str, src: str, dst: str, group: str, size: int) -> None:
    consumer = AIOKafkaConsumer(src, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="latest",
                                fetch_max_wait_ms=50, heartbeat_interval_ms=1000)
    producer = _producer(bootstrap)
    await producer.start()
    await consumer.start()
    while not consumer.assignment():
        await asyncio.sleep(0.05)
    for tp in consumer.assignment():
        await consumer.position(tp)
    print("READY", flush=True)
    try:
        async for record in consumer:
            await producer.send(dst, payload(record.offset, size), key=record.key)
    finally:
        await consumer.stop()
        await producer.stop()


async def _produce(bootstrap: str, topic: str, file: Path) -> None:
    data = file.read_bytes()
    records, i = [], 0
    while i < len(data):
        (n,) = struct.unpack_from(">I", data, i)
        records.append(data[i + 4:i + 4 + n])
        i += 4 + n
    producer = _producer(bootstrap)
    await producer.start()
    print("READY", flush=True)
    sys.stdin.readline()  # go
    for value in records:
        await producer.send(topic, value, key=b"bench:raw")
    await producer.flush()
    await producer.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("relay", "produce"))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--src")
    parser.add_argument("--dst")
    parser.add_argument("--group")
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--topic")
    parser.add_argument("--file", type=Path)
    a = parser.parse_args(argv)
    if a.mode == "relay":
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_relay(a.bootstrap, a.src, a.dst, a.group, a.size))
    else:
        asyncio.run(_produce(a.bootstrap, a.topic, a.file))


def _spawn(*args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "bench.rawkafka", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "READY":
        proc.kill()
        raise RuntimeError(f"bench.rawkafka {args[0]} did not start")
    return proc


def _end(proc: subprocess.Popen[str]) -> None:
    stop_process(proc)


async def relay_latencies(*, bootstrap: str, admin: TopicAdmin, subscriber: ChunkSubscriber, prefix: str,
                          sizes: list[int], partitions: int, runs: int, warmup: int = 20) -> list[float]:
    """Seconds from producing a record of ``sizes[0]`` bytes to receiving the record that
    ``len(sizes) - 1`` relays made of it (re-sized to ``sizes[1:]``), one record at a time: one
    Kafka hop per size (4 sizes: the three relays of a run start through the orchestrator)."""
    n_hops = len(sizes)
    hops = [f"{prefix}.relay{n_hops}-{i}" for i in range(n_hops)]
    await admin.ensure(hops[:-1], partitions=partitions)
    await admin.ensure(hops[-1:], partitions=1)
    await subscriber.watch(hops[-1:])
    relays = []
    try:
        for i in range(n_hops - 1):
            relays.append(await asyncio.to_thread(
                _spawn, "relay", "--bootstrap", bootstrap, "--src", hops[i], "--dst", hops[i + 1],
                "--group", f"{prefix}.relay{n_hops}-{i}", "--size", str(sizes[i + 1])))
        producer = _producer(bootstrap, linger_ms=0)  # the client's producer does not linger
        await producer.start()
        out: list[float] = []
        try:
            for n in range(warmup + runs):
                start = len(subscriber.by_topic[hops[-1]])
                t0 = time.perf_counter()
                await producer.send_and_wait(hops[0], payload(n, sizes[0]), key=b"bench:relay-%d" % (n % 50))
                _, got = await subscriber.wait(hops[-1], lambda c: True, start=start, timeout_s=30)
                if n >= warmup:
                    out.append(got.t - t0)
        finally:
            await producer.stop()
        return out
    finally:
        for proc in relays:
            await asyncio.to_thread(_end, proc)


async def raw_throughput(*, bootstrap: str, admin: TopicAdmin, subscriber: ChunkSubscriber, topic: str,
                         records: list[bytes]) -> dict[str, float]:
    """Produce ``records`` from another process as fast as aiokafka can; chunks/s received by
    ``subscriber`` from the first to the last record."""
    await admin.ensure([topic], partitions=1)
    await subscriber.watch([topic])
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
        for r in records:
            f.write(struct.pack(">I", len(r)) + r)
        path = Path(f.name)
    try:
        proc = await asyncio.to_thread(_spawn, "produce", "--bootstrap", bootstrap, "--topic", topic,
                                       "--file", str(path))
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        got = subscriber.by_topic[topic]
        deadline = time.monotonic() + 120
        while len(got) < len(records) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(proc.wait, 30)
    finally:
        path.unlink()
    return {"records": len(got), **arrival_rate([r.t for r in got])}


if __name__ == "__main__":
    main()

"""Percentiles and the record-size sampler shared by the figures."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from threadline.worker.step_gap import SAVE_SEGMENTS, SEGMENTS


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0–100) of ``values``, linear interpolation; NaN when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary_ms(seconds: list[float]) -> dict[str, float]:
    """``{n, p50, p95, p99, mean, max}`` in milliseconds (rounded to 0.01)."""
    ms = [x * 1000 for x in seconds]
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "p50": round(pct(ms, 50), 2), "p95": round(pct(ms, 95), 2),
            "p99": round(pct(ms, 99), 2), "mean": round(statistics.fmean(ms), 2), "max": round(max(ms), 2)}


def arrival_rate(times: list[float]) -> dict[str, float]:
    """Records per second from the receive times of consecutive records, each the time its
    fetched batch came (``Received.t``): the records after the first batch over the seconds from
    the first batch to the last. The first batch's records arrived over a time before it that is
    not seen, so counting them too (``(n - 1) / span``) overstated the rate the more records the
    first batch held. ``{"chunks_per_s", "seconds", "batches", "first_batch"}``; the rate is NaN
    when every record came in one batch."""
    if not times:
        return {"chunks_per_s": float("nan"), "seconds": 0.0, "batches": 0, "first_batch": 0}
    first = sum(1 for t in times if t == times[0])
    span = times[-1] - times[0]
    return {"chunks_per_s": (len(times) - first) / span if span > 0 else float("nan"), "seconds": span,
            "batches": len(set(times)), "first_batch": first}


def ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b else float("nan")


async def recent_record_sizes(bootstrap: str, topic: str, last: int = 20) -> list[int]:
    """Sizes (bytes of the value) of up to ``last`` most recent records of every partition of ``topic``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        if not parts:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(topic) or {0}
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        wanted = 0
        for tp in tps:
            consumer.seek(tp, max(0, ends[tp] - last))
            wanted += min(last, ends[tp])
        sizes: list[int] = []
        for _ in range(50):
            if len(sizes) >= wanted:
                break
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                sizes += [len(r.value) for r in records]
        return sizes
    finally:
        await consumer.stop()


async def all_records(bootstrap: str, topic: str) -> list[ConsumerRecord]:
    """Every record of every partition of ``topic`` (from the beginning to the end offsets now)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or {0})]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[ConsumerRecord] = []
        for _ in range(300):
            positions = [await consumer.position(tp) for tp in tps]
            if all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                break
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                out += records
        return out
    finally:
        await consumer.stop()


_FIELD = re.compile(r"\b(\w+_ms)=([0-9.]+)")


def log_segments(log_path: Path, start: int, marker: str, names: tuple[str, ...],
                 extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Per segment name, the summary (:func:`summary_ms`, ms) over the log lines containing
    ``marker`` from byte ``start`` of ``log_path`` on (a service's console log: ``name=value``
    fields in ms). A line counts when it has every one of ``names``; ``extra`` segments are read
    from the lines that have them all. ``{}`` without a log."""
    if not log_path.exists():
        return {}
    with log_path.open("rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    values: dict[str, list[float]] = {name: [] for name in (*names, *extra)}
    for line in text.splitlines():
        if marker not in line:
            continue
        fields = dict(_FIELD.findall(line))
        if all(name in fields for name in names):
            for name in names:
                values[name].append(float(fields[name]) / 1000)
            if extra and all(name in fields for name in extra):
                for name in extra:
                    values[name].append(float(fields[name]) / 1000)
    return {name: summary_ms(v) for name, v in values.items() if v or name in names}


def worker_step_gap(log_path: Path, start: int = 0) -> dict[str, Any]:
    """Per segment of :data:`~threadline.worker.step_gap.SEGMENTS` (and ``SAVE_SEGMENTS``), the
    summary (ms) over the ``step gap`` lines of a worker's log from byte ``start`` on: where the
    time between a step's ``step-finish`` and the next step's first chunk went in the worker;
    ``{}`` without a log."""
    return log_segments(log_path, start, "step gap", SEGMENTS, SAVE_SEGMENTS)

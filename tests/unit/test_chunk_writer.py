"""ChunkWriter: seq stamping, partition 0, and flush after resolved futures were pruned."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from threadline.kafka import chunk_writer
from threadline.kafka.chunk_writer import ChunkWriter


class FakeProducer:
    """Records sends; each returns a future the test resolves (or fails) when it likes."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.futures: list[asyncio.Future[Any]] = []

    async def send_raw(self, topic: str, value: bytes, *, key: Any = None, headers: Any = None,
                       partition: int | None = None) -> asyncio.Future[Any]:
        self.sent.append({"topic": topic, "value": orjson.loads(value), "key": key, "partition": partition})
        fut = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut


def _writer(producer: FakeProducer) -> ChunkWriter:
    return ChunkWriter(producer, "t", run_id="run-1", step=0, attempt=1, seq=10, key="r:t")  # type: ignore[arg-type]  # a fake producer


async def test_chunks_are_stamped_and_sent_to_partition_zero() -> None:
    producer = FakeProducer()
    writer = _writer(producer)
    for i in range(3):
        await writer.emit({"type": "text-delta", "payload": {"text": str(i)}})
    for fut in producer.futures:
        fut.set_result(None)
    await writer.flush()
    assert [s["value"]["seq"] for s in producer.sent] == [10, 11, 12]
    assert {s["partition"] for s in producer.sent} == {0}
    assert producer.sent[0]["value"]["runId"] == "run-1" and producer.sent[0]["key"] == b"r:t"


async def test_flush_waits_for_chunks_still_in_flight() -> None:
    producer = FakeProducer()
    writer = _writer(producer)
    await writer.emit({"type": "text-delta"})
    flushing = asyncio.create_task(writer.flush())
    await asyncio.sleep(0.01)
    assert not flushing.done()
    producer.futures[0].set_result(None)
    await asyncio.wait_for(flushing, 1)


async def test_a_failure_pruned_during_the_stream_is_raised_by_flush(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunk_writer, "_PRUNE_EVERY", 4)
    producer = FakeProducer()
    writer = _writer(producer)
    writer._prune_at = 4
    await writer.emit({"type": "text-delta"})
    producer.futures[0].set_exception(RuntimeError("broker said no"))
    producer.futures[0].exception()  # retrieved here, as the writer will (no asyncio warning)
    for _ in range(5):  # crosses the prune threshold: the failed future is dropped, its error kept
        await writer.emit({"type": "text-delta"})
    for fut in producer.futures[1:]:
        fut.set_result(None)
    assert len(writer._futures) < 6
    with pytest.raises(RuntimeError, match="broker said no"):
        await writer.flush()
    await writer.emit({"type": "text-delta"})  # the failure is reported once
    producer.futures[-1].set_result(None)
    await writer.flush()


async def test_flush_gives_up_on_acknowledgements_that_never_come() -> None:
    """A broker that never acknowledges must not hang the step (its heartbeat would keep beating
    and nothing would ever recover it): flush fails as a transient fault after ``ack_timeout_s``."""
    producer = FakeProducer()
    writer = ChunkWriter(producer, "t", run_id="run-1", step=0, attempt=1, seq=0, key="r:t",  # type: ignore[arg-type]  # a fake producer
                         ack_timeout_s=0.05)
    await writer.emit({"type": "text-delta", "payload": {"text": "x"}})
    with pytest.raises(TimeoutError, match="run-1"):
        await asyncio.wait_for(writer.flush(), 5)

"""Publishing a run's chunks to its thread's chunk topic with run id, step, attempt and seq.

Per chunk: one dict update, one orjson encode, one non-blocking send (the producer batches);
:meth:`ChunkWriter.flush` waits for every acknowledgement before the step result is published,
so the next step's chunks always follow this step's on the topic.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from threadline.kafka.producer import Producer

_HEADERS = [("tl-type", b"chunk")]


class ChunkWriter:
    """Assigns ``seq`` (strictly increasing within the run) and publishes."""

    __slots__ = ("_futures", "_producer", "_topic", "attempt", "finished", "key", "run_id", "seq", "step")

    def __init__(self, producer: Producer, topic: str, *, run_id: str, step: int, attempt: int,
                 seq: int, key: str) -> None:
        self._producer = producer
        self._topic = topic
        self.run_id = run_id
        self.step = step
        self.attempt = attempt
        self.seq = seq
        self.key = key.encode()
        self._futures: list[asyncio.Future[Any]] = []
        self.finished = False  # a ``finish`` chunk was emitted

    async def emit(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """Stamp and publish ``chunk``; returns it (with the stamp)."""
        chunk["runId"] = self.run_id
        chunk["step"] = self.step
        chunk["attempt"] = self.attempt
        chunk["seq"] = self.seq
        self.seq += 1
        if chunk.get("type") == "finish":
            self.finished = True
        fut = await self._producer.send_raw(self._topic, orjson.dumps(chunk), key=self.key,
                                            headers=_HEADERS)
        self._futures.append(fut)
        return chunk

    async def flush(self) -> None:
        """Wait until every emitted chunk is acknowledged."""
        futures, self._futures = self._futures, []
        if futures:
            await asyncio.gather(*futures)

"""A stopping consumer lets the handlers it cancels after the grace finish their clean-up before
it commits and the service closes its pool (the processor-worker hands its step back there; the
SIGTERM test of a sleeping tool missed "step handed back" under a loaded CI when the clean-up
raced the rest of the stop)."""

from __future__ import annotations

import asyncio
from typing import Any

from threadline.kafka.consumer import KeyedConsumer


class _StubClient:
    def __init__(self, order: list[str]) -> None:
        self.order = order

    async def stop(self) -> None:
        self.order.append("consumer stopped")


async def test_cancelled_handlers_clean_up_before_the_commit_and_the_stop() -> None:
    order: list[str] = []
    consumer = KeyedConsumer(bootstrap="broker:9092", topics=["t"], group_id="g", handler=lambda r: None)  # type: ignore[arg-type,return-value]  # never called

    async def commit(only: Any = None) -> None:
        order.append("committed")

    consumer._commit = commit  # type: ignore[method-assign]  # no broker here
    consumer._consumer = _StubClient(order)  # type: ignore[assignment]

    async def step() -> None:
        try:
            await asyncio.sleep(3600)  # a tool that never returns in time
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # the hand-back's round trip
            order.append("handed back")
            raise

    lane = asyncio.create_task(step())
    consumer._lane_tasks.add(lane)
    consumer._idle.clear()
    await asyncio.sleep(0)
    await consumer.stop(grace_s=0.01)
    assert order == ["handed back", "committed", "consumer stopped"]

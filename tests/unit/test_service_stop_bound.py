"""A stopping service returns within its bound, teardown included, even when every handler and
every registered part waits on a lock that is never released (docs/decisions.md §182; a test of
a bound, not a speed claim)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from threadline import service
from threadline.config import Settings
from threadline.kafka.consumer import KeyedConsumer

NOWHERE = "127.0.0.1:9"  # the discard port: nothing listens there


class _StubClient:
    async def stop(self) -> None:
        pass


def _consumer(lock: asyncio.Lock, handlers: int) -> KeyedConsumer:
    """A consumer whose ``handlers`` in-flight records all wait on ``lock``, and whose clean-up
    after the grace (the step handed back) waits on it again."""
    consumer = KeyedConsumer(bootstrap=NOWHERE, topics=["t"], group_id="g", handler=lambda r: None)  # type: ignore[arg-type,return-value]  # never called

    async def commit(only: Any = None) -> None:
        async with lock:  # the commit waits too
            pass

    consumer._commit = commit  # type: ignore[method-assign]  # no broker here
    consumer._consumer = _StubClient()  # type: ignore[assignment]

    async def handler() -> None:
        try:
            async with lock:
                pass
        except asyncio.CancelledError:
            async with lock:  # the hand-back needs the lock as well
                pass
            raise

    for _ in range(handlers):
        consumer._lane_tasks.add(asyncio.create_task(handler()))
    consumer._idle.clear()
    return consumer


async def test_a_stop_with_every_handler_and_part_blocked_on_a_lock_returns_within_its_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "SHUTDOWN_GRACE_S", 1.0)  # the bound's shape, at a test's scale
    monkeypatch.setattr(service, "_left_behind", [])
    lock = asyncio.Lock()
    await lock.acquire()  # never released
    svc = service.Service(Settings(kafka_bootstrap=NOWHERE))
    svc.consumer = _consumer(lock, handlers=8)
    after: list[str] = []

    async def blocked() -> None:
        async with lock:
            pass

    async def closed() -> None:
        after.append("closed")

    svc.on_stop(closed)
    svc.on_stop(blocked)  # stopped first (last registered), hangs
    svc.on_stop(blocked, before_drain=True)  # a sweeper whose stop waits on the lock
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    async with asyncio.timeout(30):  # without a bound the stop never returns
        await svc.stop()
    took = loop.time() - t0
    assert took <= service.SHUTDOWN_GRACE_S + service.SHUTDOWN_SLACK_S + 0.5 + 0.3, took
    assert after == ["closed"]  # a part that hangs does not keep the next from stopping
    assert "consumer" in service._left_behind
    assert sum(step.endswith("<locals>.blocked") for step in service._left_behind) == 2  # both parts left behind

"""Decision 101: the worker takes the thread's chunk topic and claims the step side by side (a
brand-new thread's topic costs a registry statement and a Kafka request, the claim a statement);
the step starts once both are done, and a topic that could not be taken fails the claim."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from threadline.config import Settings
from threadline.events import StepTask
from threadline.runtime.step.ports import Skipped
from threadline.topics import Topics
from threadline.worker.executor import StepExecutor


class _Side:
    """An admin or a store whose call waits until released, recording when it started."""

    def __init__(self, events: list[str], name: str, fail: BaseException | None = None) -> None:
        self.events, self.name, self.fail = events, name, fail
        self.release = asyncio.Event()

    async def _call(self, result: Any) -> Any:
        self.events.append(f"{self.name} started")
        await self.release.wait()
        self.events.append(f"{self.name} done")
        if self.fail is not None:
            raise self.fail
        return result

    async def ensure_chunk_topic(self, topic: str, **_kw: Any) -> bool:
        return await self._call(False)

    async def begin(self, run_id: str, **_kw: Any) -> Any:
        return await self._call(Skipped("test"))


def _executor(admin: _Side, store: _Side) -> StepExecutor:
    db = SimpleNamespace(max_size=4)  # the store's pool size; nothing is asked of it here
    ex = StepExecutor(db=db, producer=None, admin=None, outbox=None, topics=Topics("p"),  # type: ignore[arg-type] # only _claim runs
                      settings=Settings(), agents={})
    ex._admin, ex._store = admin, store  # type: ignore[assignment] # the two sides under test
    return ex


def _task() -> StepTask:
    return StepTask(run_id="run-1", resource_id="r", thread_id="t", step=0, attempt=1, epoch=1)


async def test_the_topic_and_the_claim_are_asked_for_at_once() -> None:
    events: list[str] = []
    admin, store = _Side(events, "topic"), _Side(events, "claim")
    claim = asyncio.create_task(_executor(admin, store)._claim(_task(), "p.chunks.r.t", takeover_from=None))
    for _ in range(5):
        await asyncio.sleep(0)
    assert sorted(events) == ["claim started", "topic started"]  # neither waits for the other
    store.release.set()
    await asyncio.sleep(0)
    assert not claim.done()  # the step starts only once its topic is there too
    admin.release.set()
    assert await claim == Skipped("test")


async def test_a_topic_not_taken_fails_the_claim_even_when_the_step_was_claimed() -> None:
    events: list[str] = []
    admin, store = _Side(events, "topic", fail=TimeoutError("being deleted")), _Side(events, "claim")
    admin.release.set()
    store.release.set()
    with pytest.raises(TimeoutError, match="being deleted"):
        await _executor(admin, store)._claim(_task(), "p.chunks.r.t", takeover_from=None)
    assert "claim done" in events  # the claim was not cut short: its answer is in, the task's retry decides

"""A thread going idle with nothing held and nothing due makes the notification-scheduler take no
chunk topic: the take (a registry statement and a metadata request) is for a thread it publishes
to. Before, every ``thread_idle`` took the thread's topic (bench/results/HISTORY.md, "Where a burst's
first tokens go": the scheduler's CPU per run start)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

import services.notification_scheduler.service as scheduler_module
from services.notification_scheduler.service import NotificationScheduler
from threadline.config import Settings


class _Admin:
    def __init__(self) -> None:
        self.taken: list[str] = []

    async def ensure_chunk_topic(self, topic: str, **_kw: Any) -> bool:
        self.taken.append(topic)
        return False


class _Outbox:
    def __init__(self) -> None:
        self.flushed: list[list[int]] = []

    async def flush(self, ids: list[int]) -> None:
        self.flushed.append(list(ids))


class _Db:
    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[object]:
        yield object()


class _Clock:
    async def now(self, _conn: object) -> str:
        return "now"


def _scheduler(monkeypatch: pytest.MonkeyPatch, *, held: list[int], due: tuple[list[int], set[tuple[str, str]]]
               ) -> tuple[NotificationScheduler, _Admin, _Outbox]:
    async def redecide_held(_conn: object, **_kw: Any) -> list[int]:
        return list(held)

    async def dispatch_due(_conn: object, **_kw: Any) -> tuple[list[int], set[tuple[str, str]]]:
        return list(due[0]), set(due[1])

    monkeypatch.setattr(scheduler_module, "redecide_held", redecide_held)
    monkeypatch.setattr(scheduler_module, "dispatch_due", dispatch_due)
    sched = NotificationScheduler(Settings())
    admin, outbox = _Admin(), _Outbox()
    sched.admin, sched.outbox, sched.db, sched.clock = admin, outbox, _Db(), _Clock()  # type: ignore[assignment]  # fakes of the I/O edges
    sched.agents = {}
    return sched, admin, outbox


async def test_an_idle_thread_with_nothing_to_deliver_takes_no_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    sched, admin, outbox = _scheduler(monkeypatch, held=[], due=([], set()))
    await sched.dispatch(thread_id="t1", resource_id="r1")
    assert admin.taken == []
    assert outbox.flushed == []


async def test_an_idle_thread_with_held_records_takes_its_topic_before_publishing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sched, admin, outbox = _scheduler(monkeypatch, held=[7], due=([], set()))
    await sched.dispatch(thread_id="t1", resource_id="r1")
    assert admin.taken == [sched.topics.chunks("r1", "t1")]
    assert outbox.flushed == [[7]]


async def test_records_due_elsewhere_take_their_threads_topics(monkeypatch: pytest.MonkeyPatch) -> None:
    sched, admin, outbox = _scheduler(monkeypatch, held=[], due=([3, 4], {("r2", "t2")}))
    await sched.dispatch()
    assert admin.taken == [sched.topics.chunks("r2", "t2")]
    assert outbox.flushed == [[3, 4]]

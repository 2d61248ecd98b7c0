"""The worker's writes a step waits for — a tool's result (``PgStepStore.save_tool_result``) and a
workflow journal entry (``PgJournal``) — retry a transient store fault with the waits of
:data:`threadline.transient.STORE_BACKOFF` and give up once their time budget is spent, raising
the last fault (the journal as ``JournalUnavailableError``). No database: a fake connection and a
fake clock that the loop's waits advance."""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import tenacity

from threadline.runtime.workflows import JournalUnavailableError
from threadline.transient import STORE_BACKOFF, Backoff
from threadline.worker import journal, step_store
from threadline.worker.journal import PgJournal
from threadline.worker.step_store import PgStepStore

pytestmark = pytest.mark.unit


class Clock:
    """The time tenacity reads, moved only by the loop's waits (which sleep for no real time)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []
        self.task: asyncio.Task[Any] | None = None
        """The test's own task: only its sleeps are the loop's waits (a task an earlier test left
        on the session's event loop sleeps for real, unrecorded)."""

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        if fake.task is None or asyncio.current_task() is not fake.task:
            await real_sleep(seconds)
            return
        fake.waits.append(seconds)
        fake.now += seconds
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    monkeypatch.setattr(tenacity, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    return fake


class FakeDb:
    """The pool ``PgStepStore`` asks for connections (each one a plain object)."""

    max_size = 4

    @asynccontextmanager
    async def connection(self, *, patient: bool = False) -> AsyncIterator[object]:
        yield object()


def failing(times: int, calls: list[int]) -> Callable[..., Any]:
    """A store function whose first ``times`` calls lose the connection; later calls return True."""

    async def write(*_: Any, **__: Any) -> bool:
        calls.append(1)
        if len(calls) <= times:
            raise ConnectionResetError(f"server restarting ({len(calls)})")
        return True
    return write


def tool_result_store(monkeypatch: pytest.MonkeyPatch, times: int, calls: list[int]) -> Callable[[], Any]:
    monkeypatch.setattr(step_store, "save_tool_result", failing(times, calls))
    store = PgStepStore(db=FakeDb(), outbox=None, topics=None, owner="w:1", lease_ttl_s=60)  # type: ignore[arg-type]  # fakes
    run = types.SimpleNamespace(run_id="run-1")
    return lambda: store.save_tool_result(run, "call-1", "lookup", {"ok": True}, None)  # type: ignore[arg-type]  # a fake run


def journal_write(monkeypatch: pytest.MonkeyPatch, times: int, calls: list[int]) -> Callable[[], Any]:
    monkeypatch.setattr(journal, "start_step", failing(times, calls))
    pg = PgJournal(FakeDb().connection, run_id="run-1", epoch=1, tool_call_id="call-1", owner="w:1", attempt=1)
    return lambda: pg.start("wf.step-a")


WRITES = {"tool result": (tool_result_store, step_store, "TOOL_RESULT_RETRY_S"),
          "journal entry": (journal_write, journal, "JOURNAL_RETRY_S")}


@pytest.mark.parametrize("which", sorted(WRITES))
async def test_a_transient_fault_is_retried_with_the_store_backoff(which: str, clock: Clock,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    make, module, _ = WRITES[which]
    clock.task = asyncio.current_task()
    monkeypatch.setattr(module, "STORE_BACKOFF", Backoff(first_s=0.5, max_s=1.5), raising=False)
    calls: list[int] = []
    await make(monkeypatch, 4, calls)()
    assert len(calls) == 5
    assert clock.waits == [0.5, 1.0, 1.5, 1.5]  # the named backoff's waits, not a loop's own


@pytest.mark.parametrize("which", sorted(WRITES))
async def test_the_retry_gives_up_once_its_budget_is_spent(which: str, clock: Clock,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    make, module, budget_name = WRITES[which]
    clock.task = asyncio.current_task()
    budget: float = getattr(module, budget_name)
    calls: list[int] = []
    expected = JournalUnavailableError if module is journal else ConnectionResetError
    with pytest.raises(expected, match=r"server restarting \((\d+)\)") as raised:
        await make(monkeypatch, 10_000, calls)()
    assert clock.waits[:6] == [STORE_BACKOFF.first_s * 2 ** n for n in range(5)] + [STORE_BACKOFF.max_s]
    assert sum(clock.waits[:-1]) < budget <= sum(clock.waits)  # stopped at the first failure past the budget
    assert f"({len(calls)})" in str(raised.value)  # the last attempt's fault
    assert len(calls) == len(clock.waits) + 1

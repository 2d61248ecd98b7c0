"""The one retry loop (``threadline.transient.retrying``): transient faults are retried with the
named backoff's waits, any other error is raised at once, and the loop stops after its attempts
or its time, raising what the last attempt raised."""

from __future__ import annotations

import asyncio

import pytest

from threadline.transient import CONNECT_BACKOFF, RECORD_BACKOFF, Backoff, retrying


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits the loop asked for (none of them slept)."""
    asked: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        asked.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return asked


async def _failing(times: int, exc: Exception, calls: list[int]) -> None:
    calls.append(1)
    if len(calls) <= times:
        raise exc


async def test_transient_faults_are_retried_with_the_backoffs_waits(waits: list[float]) -> None:
    calls: list[int] = []
    async for attempt in retrying(CONNECT_BACKOFF):
        with attempt:
            await _failing(6, ConnectionRefusedError("away"), calls)
    assert len(calls) == 7
    assert waits == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]  # doubling from first_s, capped at max_s


async def test_another_error_is_raised_at_once(waits: list[float]) -> None:
    calls: list[int] = []
    with pytest.raises(ValueError, match="bad input"):
        async for attempt in retrying(RECORD_BACKOFF, attempts=6):
            with attempt:
                await _failing(6, ValueError("bad input"), calls)
    assert len(calls) == 1 and waits == []


async def test_the_last_fault_is_raised_once_the_attempts_are_spent(waits: list[float]) -> None:
    calls: list[int] = []
    with pytest.raises(TimeoutError):
        async for attempt in retrying(Backoff(first_s=0.1, max_s=0.3), attempts=4):
            with attempt:
                await _failing(10, TimeoutError("slow"), calls)
    assert len(calls) == 4 and waits == [0.1, 0.2, 0.3]


async def test_a_time_bound_stops_the_retries() -> None:
    calls: list[int] = []
    with pytest.raises(ConnectionResetError):
        async for attempt in retrying(Backoff(first_s=0.01, max_s=0.01), for_s=0.05):
            with attempt:
                await _failing(1000, ConnectionResetError("gone"), calls)
    assert 2 <= len(calls) < 50


async def test_before_sleep_sees_each_retry(waits: list[float]) -> None:
    seen: list[str] = []
    calls: list[int] = []
    async for attempt in retrying(RECORD_BACKOFF, attempts=6,
                                  before_sleep=lambda state: seen.append(type(state.outcome.exception()).__name__)):
        with attempt:
            await _failing(2, OSError("reset"), calls)
    assert seen == ["OSError", "OSError"]

"""A background duty (outbox relay, stuck-run sweeper) outlives a pass that hangs: with
``timeout_s`` the hung pass is cancelled and the next one runs on time. Without it, one Kafka
acknowledgement that never came stopped the duty for good (and the relay kept its row locks)."""

from __future__ import annotations

import asyncio

from threadline._internal.periodic import Periodic


async def _until_called(calls: list[int], times: int) -> None:
    for _ in range(500):
        if len(calls) >= times:
            return
        await asyncio.sleep(0.01)


async def test_a_hung_pass_is_cancelled_and_the_next_one_runs():
    calls: list[int] = []
    cancelled = asyncio.Event()

    async def duty() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            try:
                await asyncio.Event().wait()  # hangs, like an acknowledgement that never comes
            except asyncio.CancelledError:
                cancelled.set()
                raise

    p = Periodic("test-duty", 0.01, duty, failure="duty failed", timeout_s=0.05)
    await p.start()
    try:
        await asyncio.wait_for(cancelled.wait(), 5)
        await _until_called(calls, 3)
    finally:
        await p.stop()
    assert cancelled.is_set()
    assert len(calls) >= 3


async def test_a_failing_pass_does_not_stop_the_duty():
    calls: list[int] = []

    async def duty() -> None:
        calls.append(1)
        raise ConnectionRefusedError("postgres away")

    p = Periodic("test-duty", 0.01, duty, failure="duty failed")
    await p.start()
    try:
        await _until_called(calls, 3)
    finally:
        await p.stop()
    assert len(calls) >= 3


async def test_a_transient_failure_is_one_log_line_without_a_traceback(monkeypatch):
    from threadline._internal import periodic
    from threadline.store.db import PoolTimeoutError

    logged: list[tuple[str, dict]] = []
    monkeypatch.setattr(periodic.log, "warning", lambda msg, **kw: logged.append((msg, kw)))
    calls: list[int] = []

    async def duty() -> None:
        calls.append(1)
        raise PoolTimeoutError("no Postgres connection free within 10 s (pool of 10)") if len(calls) == 1 \
            else ValueError("a bug")

    p = Periodic("test-duty", 0.01, duty, failure="duty failed")
    await p.start()
    try:
        await _until_called(calls, 2)
        await asyncio.sleep(0.05)
    finally:
        await p.stop()
    first, second = logged[0], logged[1]
    assert "exc_info" not in first[1] and "PoolTimeoutError: no Postgres connection" in first[1]["error"]
    assert second[1].get("exc_info") is True  # a bug keeps its traceback

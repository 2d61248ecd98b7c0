"""D07: rate-limit places taken by calls that never happen are given back
(threadline.store.model_limits; decision 197). The case's scale divided by ten: 600 requests per
minute (one every 0.1 s, evenly spaced), 30 callers, 28 of them cancelled while they wait."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from threadline.store.db import Database
from threadline.store.model_limits import ModelLimit, PgModelLimiter


async def test_d07_a_places_of_cancelled_waits_are_given_back(cluster) -> None:
    model = f"openai/threadline-lim-{uuid.uuid4().hex[:6]}"
    called: list[float] = []
    async with Database(cluster.dsn, max_size=4) as db:
        limiter = PgModelLimiter(db, {model: ModelLimit(rpm=600)}, burst_s=0)
        t0 = time.monotonic()

        async def caller() -> None:
            await limiter.acquire(model, 0)
            called.append(time.monotonic() - t0)  # the model call would go out now

        tasks = [asyncio.create_task(caller()) for _ in range(30)]  # places 0 … 2.9 s
        await asyncio.sleep(0.25)
        waiting = [t for t in tasks if not t.done()]
        assert len(waiting) >= 27  # places at 0.3 s and later are still waiting
        for task in waiting:  # the aborts
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        aborted_at = time.monotonic() - t0
        assert aborted_at <= 0.25 + 0.5  # cancelled waits end at once
        await asyncio.sleep(max(0.0, 0.35 - (time.monotonic() - t0)))
        late = await limiter.acquire(model, 0)  # T31
    assert len(called) == 30 - len(waiting)  # no cancelled caller goes on to call
    # T31 waits for the places really used, not for the 27+ given up (without giving back: ~2.6 s)
    assert late <= 0.2, late


async def test_d07_a_failed_wait_gives_its_place_back(cluster) -> None:
    """Any error that ends the wait gives the places back, not only a cancellation."""
    model = f"openai/threadline-lim-{uuid.uuid4().hex[:6]}"

    async def broken_sleep(_: float) -> None:
        raise RuntimeError("the step ended")

    async with Database(cluster.dsn, max_size=2) as db:
        limits = {model: ModelLimit(rpm=60, tpm=6000)}
        await PgModelLimiter(db, limits, burst_s=0).acquire(model, 10)  # the bucket is empty now
        failing = PgModelLimiter(db, limits, burst_s=0, sleep=broken_sleep)
        for _ in range(5):
            with pytest.raises(RuntimeError):  # the wait's own error reaches the caller
                await failing.acquire(model, 10)
        waits: list[float] = []

        async def record(s: float) -> None:
            waits.append(s)

        wait = await PgModelLimiter(db, limits, burst_s=0, sleep=record).acquire(model, 10)
    assert 0.5 <= wait <= 1.0, wait  # one place after the first call, not six

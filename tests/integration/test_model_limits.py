"""Cluster-wide provider limits (threadline.store.model_limits): two limiters on one database —
two workers — share one bucket per model, and nobody waits holding a connection."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.integration.test_keepalive import CountingDb
from threadline.store.db import Database
from threadline.store.model_limits import ModelLimit, PgModelLimiter, parse_limits


async def test_two_workers_share_the_rate_in_the_order_they_took(cluster):
    model = f"openai/limited-{uuid.uuid4().hex[:6]}"
    waits: list[float] = []

    async def record(s: float) -> None:
        waits.append(s)

    async with Database(cluster.dsn, max_size=1) as db1, Database(cluster.dsn, max_size=1) as db2:
        counted = CountingDb(db1)
        limits = {model: ModelLimit(rpm=600)}  # 10 requests/s over both
        workers = [PgModelLimiter(counted, limits, burst_s=0, sleep=record),  # type: ignore[arg-type]
                   PgModelLimiter(db2, limits, burst_s=0, sleep=record)]
        t0 = time.monotonic()
        got = [await workers[i % 2].acquire(model, 0) for i in range(20)]
        elapsed = time.monotonic() - t0
        assert await workers[0].acquire("openai/unlimited", 10**6) == 0.0
    assert got[0] == 0.0 and waits == got[1:]  # the first is due at once; each later one waited
    # the n-th call is due n/10 s after the first: the reservation, less the time already passed
    for n, wait in enumerate(got):
        assert n * 0.1 - elapsed - 0.01 <= wait <= n * 0.1 + 0.01, (n, wait)
    assert counted.acquired == 10  # one short statement per take, none held through a wait


async def test_tokens_per_minute_count_the_prompt_before_and_the_output_after(cluster):
    model = f"openai/tpm-{uuid.uuid4().hex[:6]}"
    async with Database(cluster.dsn, max_size=1) as db:
        limiter = PgModelLimiter(db, {model: ModelLimit(tpm=6000)}, burst_s=1, sleep=_no_sleep)  # 100 tokens/s
        started = time.monotonic()
        assert await limiter.acquire(model, 100) == 0.0  # the bucket holds one second: full
        await limiter.settle(model, 200)  # the answer's 200 tokens are debt
        wait = await limiter.acquire(model, 50)
        between = time.monotonic() - started
    # (200 + 50) / 100 tokens/s, less what refilled in the moments in between (long on a loaded machine)
    assert 2.5 - between - 0.01 <= wait <= 2.5


async def _no_sleep(_: float) -> None:
    return None


def test_limits_are_checked_when_the_worker_starts() -> None:
    assert parse_limits({"a/b": {"rpm": 60}}) == {"a/b": ModelLimit(rpm=60.0)}
    for bad in ({"a/b": {"rpm": 0}}, {"a/b": {"rps": 1}}, {"a/b": 5}, {"a/b": {"tpm": True}}):
        with pytest.raises(ValueError):
            parse_limits(bad)

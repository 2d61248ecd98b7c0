"""bench.env.broker_settled: a bench waits while the native broker still removes the partitions
of an earlier bench's deleted topics (their ``-delete`` directories), and no longer."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.env import broker_settled, pending_deletions


async def test_waits_until_the_deleted_partitions_are_gone(tmp_path: Path) -> None:
    (tmp_path / "tlbench-x.chunks.a-0").mkdir()
    gone = tmp_path / "tlbench-y.chunks.b-0.3f2a-delete"
    gone.mkdir()
    assert pending_deletions(tmp_path) == 1

    async def broker_removes() -> None:
        await asyncio.sleep(1.2)
        gone.rmdir()

    remover = asyncio.create_task(broker_removes())
    waited = await broker_settled(tmp_path, limit_s=10)
    await remover
    assert 1.0 <= waited < 5


async def test_gives_up_at_the_limit_and_skips_a_broker_it_cannot_see(tmp_path: Path) -> None:
    (tmp_path / "t-0.1-delete").mkdir()
    assert 0.9 <= await broker_settled(tmp_path, limit_s=1.0) < 3
    assert await broker_settled(tmp_path / "absent", limit_s=10) < 0.5

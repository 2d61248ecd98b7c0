"""Decision 66: a worker that stored a step and claimed the next one goes on while the statement's
connection goes back to the pool in the background. The connection's slot stays taken until it
is back (a worker never holds more connections for steps than it has slots), the callback runs
exactly once on every path, and a connection that failed is released inline as before."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.test_step_result_async import _setup
from tests.integration.test_step_store import _run
from threadline.runtime.ports import Claimed, Continue, StepRecord
from threadline.store.db import Database, PoolTimeoutError


async def test_a_connection_released_later_goes_back_after_the_caller_went_on(cluster):
    async with Database(cluster.dsn, max_size=1) as db:
        calls: list[str] = []
        async with db.connection(released=lambda: calls.append("released")) as conn:
            assert await conn.fetchval("SELECT 1") == 1
        assert calls == []  # the caller went on before the release
        async with asyncio.timeout(5), db.connection() as again:  # a pool of one: it came back
            assert await again.fetchval("SELECT 2") == 2
        assert calls == ["released"]


async def test_released_is_called_once_after_an_error_and_when_nothing_was_acquired(cluster):
    async with Database(cluster.dsn, max_size=1) as db:
        calls: list[str] = []
        with pytest.raises(RuntimeError):
            async with db.connection(released=lambda: calls.append("error")):
                raise RuntimeError("the caller failed")
        assert calls == ["error"]  # inline: released before the error reached the caller
        db._acquire_timeout_s = 0.01  # after the pool connected (create_pool uses it to connect)
        async with db.connection():
            with pytest.raises(PoolTimeoutError):
                async with db.connection(released=lambda: calls.append("none")):
                    pass
        await asyncio.sleep(0.05)
        assert calls == ["error", "none"]


async def test_a_continued_save_keeps_its_slot_until_its_connection_is_back(own_cluster):
    async with _setup(own_cluster) as (db, _producer, held, store, _topics):  # one step slot
        assert store.release_later
        r = await _run(db)
        begun = await store.begin(r["run_id"], step=0, epoch=3)
        assert isinstance(begun, Claimed)
        await store.save(StepRecord(run=begun.run, attempt=1, outcome=Continue("tool-calls"), entries=[],
                                    consumed=[], state={"steps": [0]}, next_seq=10, usage={"totalTokens": 1}))
        assert store._slots.locked()  # returned while its connection was still on its way back
        async with asyncio.timeout(5):
            while store._slots.locked():
                await asyncio.sleep(0.005)
        assert isinstance(store.take_next(r["run_id"]), Claimed)
        await asyncio.sleep(0.2)  # the background publish sends the result, held by the test
        await held.release(None)
        async with asyncio.timeout(10):
            await store.settle(r["run_id"])

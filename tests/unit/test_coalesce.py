"""The coalescer (``threadline._internal.coalesce``): concurrent callers share one batch, callers
arriving while a batch is in flight form the next one, and errors reach exactly their callers."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from threadline._internal.coalesce import Coalescer


class _Recorder:
    def __init__(self, fail: Mapping[str, BaseException] | None = None, raise_: BaseException | None = None) -> None:
        self.batches: list[list[str]] = []
        self.fail = dict(fail or {})
        self.raise_ = raise_
        self.gate: asyncio.Event | None = None

    async def __call__(self, items: list[str]) -> Mapping[str, BaseException]:
        self.batches.append(items)
        if self.gate is not None:
            await self.gate.wait()
        if self.raise_ is not None:
            raise self.raise_
        return {i: e for i, e in self.fail.items() if i in items}


async def test_callers_of_one_loop_turn_share_one_batch() -> None:
    run = _Recorder()
    c = Coalescer(run)
    await asyncio.gather(*(c.submit(f"t{i}") for i in range(50)))
    assert run.batches == [[f"t{i}" for i in range(50)]]


async def test_callers_arriving_during_a_flight_form_the_next_batch() -> None:
    run = _Recorder()
    run.gate = asyncio.Event()
    c = Coalescer(run)
    first = asyncio.ensure_future(c.submit("a"))
    await asyncio.sleep(0.01)  # "a" is in flight, waiting on the gate
    later = [asyncio.ensure_future(c.submit(x)) for x in ("b", "c", "b")]
    await asyncio.sleep(0.01)
    assert run.batches == [["a"]] and not first.done()
    run.gate.set()
    await asyncio.gather(first, *later)
    assert run.batches == [["a"], ["b", "c"]]  # equal items share one slot


async def test_an_item_error_reaches_only_its_callers() -> None:
    boom = KeyError("t1")
    c = Coalescer(_Recorder(fail={"t1": boom}))
    got = await asyncio.gather(c.submit("t0"), c.submit("t1"), c.submit("t1"), c.submit("t2"), return_exceptions=True)
    assert got[0] is None and got[3] is None
    assert got[1] is boom and got[2] is boom


async def test_a_batch_error_reaches_every_caller_and_the_next_batch_runs() -> None:
    run = _Recorder(raise_=ConnectionError("broker away"))
    c = Coalescer(run)
    got = await asyncio.gather(c.submit("a"), c.submit("b"), return_exceptions=True)
    assert all(isinstance(g, ConnectionError) for g in got)
    run.raise_ = None
    await c.submit("c")
    assert run.batches[-1] == ["c"]


async def test_a_cancelled_caller_leaves_the_batch_running_for_the_others() -> None:
    run = _Recorder()
    run.gate = asyncio.Event()
    c = Coalescer(run)
    leaving = asyncio.ensure_future(c.submit("a"))
    staying = asyncio.ensure_future(c.submit("b"))
    await asyncio.sleep(0.01)
    leaving.cancel()
    run.gate.set()
    await staying
    assert leaving.cancelled() and run.batches == [["a", "b"]]


async def test_max_batch_splits_a_crowd() -> None:
    run = _Recorder()
    c = Coalescer(run, max_batch=3)
    await asyncio.gather(*(c.submit(f"t{i}") for i in range(7)))
    assert [len(b) for b in run.batches] == [3, 3, 1]
    with pytest.raises(ValueError, match="max_batch"):
        Coalescer(run, max_batch=0)

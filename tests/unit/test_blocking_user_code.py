"""User code that blocks: a tool or tool hook written as
a plain ``def`` that sleeps or does blocking I/O runs in a worker thread, so the worker's event
loop — every other run's chunks, heartbeats and aborts — goes on meanwhile, and an abort (the
step's task cancelled) returns at once instead of after the blocking call."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest

from threadline._internal.usercode import call_user, is_async
from threadline.runtime.step.tools import run_tool_call
from threadline.runtime.tools import ToolContext, ToolHooks, create_tool


def _ctx() -> ToolContext:
    return ToolContext(tool_call_id="c1", run_id="run-1", thread_id="th-1", resource_id="res-1", agent_id="a",
                       step=0, idempotency_key="run-1:c1", writer=SimpleNamespace())


async def _release_soon(event: threading.Event) -> None:
    await asyncio.sleep(0.05)  # runs only if the loop is free while the tool blocks
    event.set()


async def test_a_blocking_tool_leaves_the_event_loop_free() -> None:
    released = threading.Event()

    def wait_for_release(_args: object) -> str:
        return "released" if released.wait(5) else "the loop was blocked"

    tool = create_tool(id="blocker", description="blocks", execute=wait_for_release)
    result, _ = await asyncio.gather(tool.run({}, _ctx()), _release_soon(released))
    assert result == "released"


async def test_blocking_tool_hooks_leave_the_event_loop_free() -> None:
    released = threading.Event()
    seen: list[str] = []

    def before(ctx: object) -> None:
        seen.append("before " + ("released" if released.wait(5) else "blocked"))

    def after(ctx: object) -> None:
        seen.append("after")

    tool = create_tool(id="quick", description="", execute=lambda _a: "ok")
    out, _ = await asyncio.gather(
        run_tool_call(call={"toolName": "quick", "toolCallId": "c1", "args": {}}, tools={"quick": tool},
                      hooks=ToolHooks(before_tool_call=before, after_tool_call=after), context=_ctx(), agent_meta={}),
        _release_soon(released))
    assert out == ("ok", None)
    assert seen == ["before released", "after"]


async def test_an_abort_does_not_wait_for_a_blocking_tool() -> None:
    started, gate = threading.Event(), threading.Event()

    def slow(_args: object) -> str:
        started.set()
        gate.wait(5)
        return "late"

    tool = create_tool(id="slow", description="", execute=slow)
    task = asyncio.create_task(tool.run({}, _ctx()))
    while not started.is_set():
        await asyncio.sleep(0.01)
    task.cancel()  # what the worker does when the run is aborted
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
    gate.set()


async def test_async_tools_and_awaitables_from_plain_callables_still_work() -> None:
    async def coro_tool(_args: object) -> str:
        return "async"

    async def later() -> str:
        return "returned awaitable"

    assert is_async(coro_tool) and not is_async(lambda _a: later())
    assert await call_user(coro_tool, {}) == "async"
    assert await call_user(lambda _a: later(), {}) == "returned awaitable"


async def test_an_abort_sets_the_tools_abort_signal_and_a_polling_tool_stops() -> None:
    stopped = threading.Event()

    def polite(_args: object, context: ToolContext) -> str:
        while not context.abort_signal.wait(0.01):
            pass
        stopped.set()
        return "stopped"

    ctx = _ctx()
    assert ctx.abort_signal.aborted is False
    tool = create_tool(id="polite", description="", execute=polite)
    task = asyncio.create_task(tool.run({}, ctx))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
    ctx.abort_signal.set()  # what the loop does when the step is cancelled (test_sleepy_tools.py)
    assert await asyncio.to_thread(stopped.wait, 2) and ctx.abort_signal.aborted


async def test_plain_processor_methods_run_off_the_event_loop() -> None:
    from threadline._internal.attrdict import wrap
    from threadline.runtime import Processor, ProcessorRunner, TripWire

    released = threading.Event()

    class Blocking(Processor):
        id = "blocking"

        def process_output_stream(self, *, part, abort, **_):  # a plain def that blocks
            if not released.wait(5):
                return None
            if part.payload.text == "bad":
                abort("bad text")
            return part

    runner = ProcessorRunner(input_processors=[], output_processors=[Blocking()], error_processors=[], states={})
    out, _ = await asyncio.gather(runner.process_output_stream(wrap({"type": "text-delta", "payload": {"text": "ok"}})),
                                  _release_soon(released))
    assert out is not None and out.payload.text == "ok"  # None would mean the loop was blocked
    with pytest.raises(TripWire):  # abort() from the thread still trips
        await runner.process_output_stream(wrap({"type": "text-delta", "payload": {"text": "bad"}}))

"""User code that blocks: a tool written as a plain ``def`` that sleeps runs off the
worker's event loop — another run on the same worker keeps streaming and the sleeping step's
heartbeat keeps moving; an abort ends the run with ``finish {abort}`` at once (the tool's result
is dropped), and a tool that polls ``context.abort_signal`` stops early."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from tests.e2e.helpers import collect_run, own_instances, rows, wait_idle
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms


async def _until(sub: Any, kind: str, timeout_s: float = 30) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    async def pump() -> None:
        async for chunk in sub.stream:
            seen.append(chunk)
            if chunk["type"] == kind:
                return

    await asyncio.wait_for(pump(), timeout_s)
    return seen


async def _heartbeat(dsn: str, run_id: str) -> Any:
    return (await rows(dsn, "SELECT step_heartbeat FROM runs WHERE run_id = $1", run_id))[0]["step_heartbeat"]


async def test_a_sleeping_plain_tool_does_not_freeze_the_worker(services, settings, model, cluster):
    model.queue([ms.tool_calls(ms.tool_call("nap", {"seconds": 6}, id="n1")), ms.text("rested")],
                model="threadline-sleepy")
    model.queue([{"chunks": [f"w{i} " for i in range(8)], "chunk_delay": 0.25}], model="threadline-chatty")
    slow_thread, chat_thread = f"th-nap-{uuid.uuid4().hex[:6]}", f"th-chat-{uuid.uuid4().hex[:6]}"
    async with ThreadlineClient(settings) as tl:
        slow = await tl.subscribe_to_thread("res-1", slow_thread)
        chat = await tl.subscribe_to_thread("res-1", chat_thread)
        nap_run = (await (await tl.stream("nap", agent_id="sleepy-tools", resource_id="res-1",
                                          thread_id=slow_thread)).accepted).run_id
        await _until(slow, "tool-call")
        napping_since = time.monotonic()
        beat0 = await _heartbeat(cluster.dsn, nap_run)
        await (await tl.stream("talk", agent_id="chatty", resource_id="res-1", thread_id=chat_thread)).accepted
        chatted = await collect_run(chat, timeout_s=30)
        chat_done = time.monotonic() - napping_since
        beat1 = await _heartbeat(cluster.dsn, nap_run)
        rest = await collect_run(slow, timeout_s=30)
        for sub in (slow, chat):
            await sub.unsubscribe()
    # the other run streamed all its chunks while the tool slept (6 s), not after it
    assert [c["type"] for c in chatted].count("text-delta") == 8 and chatted[-1]["type"] == "finish"
    assert chat_done < 5.5, chat_done
    assert beat1 is not None and beat0 is not None and beat1 > beat0  # heartbeats went on meanwhile
    result = next(c for c in rest if c["type"] == "tool-result")
    assert result["payload"]["result"] == {"slept": 6.0}
    assert rest[-1]["type"] == "finish" and rest[-1]["payload"]["finishReason"] == "stop"
    assert await wait_idle(cluster.dsn, slow_thread)


async def test_an_abort_during_a_sleeping_tool_ends_the_run_at_once(services, settings, model, cluster, tmp_path):
    marker = Path(tmp_path) / "watchful"
    model.queue([ms.tool_calls(ms.tool_call("nap", {"seconds": 10}, id="n1"))], model="threadline-sleepy")
    model.queue([ms.tool_calls(ms.tool_call("watchful", {"marker": str(marker), "seconds": 20}, id="w1"))],
                model="threadline-sleepy")
    for tag in ("nap", "watch"):
        thread = f"th-abort-{tag}-{uuid.uuid4().hex[:6]}"
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            await (await tl.stream(tag, agent_id="sleepy-tools", resource_id="res-1", thread_id=thread)).accepted
            await _until(sub, "tool-call")
            await asyncio.sleep(0.5)  # the tool is running in its thread
            aborted_at = time.monotonic()
            assert await sub.abort() is True
            tail = await _until(sub, "finish", timeout_s=10)
            took = time.monotonic() - aborted_at
            await sub.unsubscribe()
        assert took < 2.0 + 1.0, took  # the case's 2 s, with slack for a loaded machine
        assert [c["type"] for c in tail][-2:] == ["abort", "finish"]
        assert tail[-1]["payload"]["stepResult"]["reason"] == "abort"
        assert "tool-result" not in [c["type"] for c in tail]  # the late result is dropped
        assert await wait_idle(cluster.dsn, thread)
    # the polling tool saw the abort and stopped long before its 20 s
    deadline = time.monotonic() + 3
    while not marker.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    state, waited = marker.read_text().split()
    assert state == "aborted" and float(waited) < 5, marker.read_text()


async def test_sigterm_exits_within_its_bound_while_a_tool_thread_sleeps(services, settings, model, cluster):
    """A plain tool that never returns in time cannot hold a stopping worker: the step is handed
    back at the 10 s grace and the process exits without waiting for the thread (it used to wait
    for it at interpreter exit, here 60 s)."""
    model.queue([ms.tool_calls(ms.tool_call("nap", {"seconds": 60}, id="n1"))], model="threadline-sleepy")
    thread = f"th-term-nap-{uuid.uuid4().hex[:6]}"
    with own_instances(services, "processor_worker", "processor_worker-1") as started:
        services.start("processor_worker", "processor_worker-napper")
        started.append("processor_worker-napper")
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            await (await tl.stream("nap", agent_id="sleepy-tools", resource_id="res-1", thread_id=thread)).accepted
            await _until(sub, "tool-call")
            await asyncio.sleep(1.0)  # the tool sleeps in its thread
            t0 = time.monotonic()
            await asyncio.to_thread(services.stop, "processor_worker-napper", timeout_s=90)  # SIGTERM, waits
            stopped_s = time.monotonic() - t0
            assert await sub.abort() is True  # the handed-back step need not nap again
            await sub.unsubscribe()
    log = (services.log_dir / "processor_worker-napper.log").read_text()
    assert "step handed back" in log
    # grace 10 s + the rest of the stop 3 s + the exit margin 2 s (docs/reliability.md, guarantee 10)
    assert stopped_s < 15 + 3, stopped_s
    assert await wait_idle(cluster.dsn, thread, timeout_s=30)

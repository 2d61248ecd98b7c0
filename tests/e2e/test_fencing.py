"""C27 (a stale run's late writes are fenced) and the SIGTERM drain of a processor-worker."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid

import pytest

from tests.e2e.checker import Figures, check_stream, clean
from tests.e2e.faults import wait_file
from tests.e2e.helpers import collect_run, rows, run_row, second_worker, wait_idle, worker_of
from threadline.client import ThreadlineClient
from threadline.store import leases
from threadline.testing import model_script as ms


async def test_c27_a_cancelled_runs_late_write_is_fenced(services, settings, model, cluster, tmp_path):
    thread = f"th-c27-{uuid.uuid4().hex[:6]}"
    pause_file = tmp_path / "paused"
    model.queue([ms.text("old answer"), ms.text("new answer")], model="threadline-echo")
    services.stop("processor_worker-1")
    # R1's worker stalls before its step result write and does not hear the abort
    services.start("processor_worker", "processor_worker-stale", THREADLINE_PAUSE_POINTS="before_step_result_write",
                   THREADLINE_PAUSE_FILE=str(pause_file), THREADLINE_PAUSE_SECONDS="5", THREADLINE_PAUSE_DEAF="1")
    stale = services.procs["processor_worker-stale"]
    try:
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            r1 = (await (await tl.stream("first", agent_id="echo-agent", resource_id="res-1",
                                         thread_id=thread)).accepted).run_id
            await asyncio.to_thread(wait_file, pause_file, "before_step_result_write")
            os.kill(stale.pid, signal.SIGSTOP)  # frozen: its group session lapses, its partitions move
            services.start("processor_worker", "processor_worker-1")
            assert await tl.abort(resource_id="res-1", thread_id=thread)
            sent = await tl.send_message("second", resource_id="res-1", thread_id=thread, agent_id="echo-agent")
            r2 = (await sent.accepted).run_id
            assert r2 != r1
            chunks = await _collect(sub, lambda c: c["type"] == "finish" and c["runId"] == r2, 90)
            assert (await run_row(cluster.dsn, r2))["status"] == "finished"
            assert await wait_idle(cluster.dsn, thread)
            lease_before = (await rows(cluster.dsn, "SELECT * FROM thread_leases WHERE thread_id = $1", thread))[0]
            run1_before = (await rows(cluster.dsn, "SELECT * FROM runs WHERE run_id = $1", r1))[0]
            os.kill(stale.pid, signal.SIGCONT)  # the stale owner wakes up and tries its late write
            await asyncio.to_thread(services.wait_log, "processor_worker-stale", "stale writer: step result discarded")
            await asyncio.sleep(1.0)
            late = await _collect(sub, lambda c: False, 3)  # what R1's worker publishes afterwards
            await sub.unsubscribe()
    finally:
        if "processor_worker-stale" in services.procs:
            os.kill(stale.pid, signal.SIGCONT)
            services.kill("processor_worker-stale")
        if "processor_worker-1" not in services.procs:
            services.start("processor_worker", "processor_worker-1")
    # every late write was rejected: the lease row and R1's row are untouched, R2's answer is the latest
    lease_after = (await rows(cluster.dsn, "SELECT * FROM thread_leases WHERE thread_id = $1", thread))[0]
    assert dict(lease_after) == dict(lease_before)
    run1_after = (await rows(cluster.dsn, "SELECT * FROM runs WHERE run_id = $1", r1))[0]
    assert dict(run1_after) == dict(run1_before) and run1_after["status"] == "aborted"
    answers = await rows(cluster.dsn, "SELECT run_id, content FROM messages WHERE thread_id = $1 AND role = 'assistant' "
                                      "ORDER BY position", thread)
    texts = [p.get("text") for m in answers for p in m["content"]["parts"] if p.get("type") == "text"]
    assert texts[-1] == "new answer" and "old answer" not in texts
    # R1's late release leaves the current lease untouched
    async with _Conn(cluster.dsn) as conn:
        assert not await leases.release(conn, thread, r1, run1_before["epoch"])
    assert dict((await rows(cluster.dsn, "SELECT * FROM thread_leases WHERE thread_id = $1", thread))[0]) == dict(lease_before)
    # the subscriber: R1 ended with abort, R2's answer is the latest; nothing of R1 came after
    fig = Figures()
    kept = clean(chunks + late, fig)
    for run_id in (r1, r2):
        check_stream(run_id, kept[run_id], fig)
    assert fig.ok, fig.problems
    assert [c["payload"]["finishReason"] for c in kept[r1] if c["type"] == "finish"] == ["abort"]
    assert all(c["runId"] == r1 for c in late)
    last_text = [c for c in chunks + late if c["type"] == "text-delta"][-1]
    assert last_text["runId"] == r2


async def _collect(sub, until, timeout_s: float) -> list:
    """Chunks until ``until(chunk)`` holds, or until ``timeout_s`` passes (then what came)."""
    out: list = []

    async def pump() -> None:
        async for chunk in sub.stream:
            out.append(chunk)
            if until(chunk):
                return

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(pump(), timeout_s)
    return out


class _Conn:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def __aenter__(self):
        import asyncpg

        self.c = await asyncpg.connect(self.dsn)
        return self.c

    async def __aexit__(self, *exc) -> None:
        await self.c.close()


@pytest.mark.parametrize("step_s", [3, 25], ids=["finishes-within-grace", "handed-back"])
async def test_sigterm_drains_or_hands_back_the_step(services, settings, model, cluster, step_s):
    """SIGTERM a worker mid-step: the step finishes within the 10 s grace period, or (longer) it
    is handed back and re-executed by the other worker at once; the run finishes either way."""
    thread = f"th-term-{uuid.uuid4().hex[:6]}"
    words = " ".join(f"w{i}" for i in range(10))
    model.queue([ms.text(words, chunk_delay=step_s / 10), ms.text(words, chunk_delay=0.05)], model="threadline-echo")
    with second_worker(services):
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            run_id = (await (await tl.stream("x", agent_id="echo-agent", resource_id="res-1",
                                             thread_id=thread)).accepted).run_id
            deadline = time.monotonic() + 30
            running = None
            while running is None:
                assert time.monotonic() < deadline
                running = worker_of(services, thread)
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # mid-step
            t0 = time.monotonic()
            await asyncio.to_thread(services.stop, running)  # SIGTERM, waits for the exit
            stopped_s = time.monotonic() - t0
            log = (services.log_dir / f"{running}.log").read_text()
            chunks = await collect_run(sub, timeout_s=90)
            await sub.unsubscribe()
    fig = Figures()
    kept = clean(chunks, fig)[run_id]
    check_stream(run_id, kept, fig)
    assert fig.ok, fig.problems
    assert "".join(c["payload"]["text"] for c in kept if c["type"] == "text-delta") == words
    assert (await run_row(cluster.dsn, run_id))["status"] == "finished"
    if step_s < 10:
        assert fig.discarded_attempts == 0 and "step handed back" not in log  # drained
    else:
        assert fig.discarded_attempts == 1 and "step handed back" in log, stopped_s
    assert await wait_idle(cluster.dsn, thread)

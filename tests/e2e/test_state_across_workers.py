"""Per-processor state is carried in Postgres, so a step that moves to another worker instance
continues the count."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid

from tests.e2e.helpers import WORKERS, collect_run, run_row, second_worker
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms


def _wait_exit(services, name: str | None) -> None:
    """Wait for the drained worker ``name`` (if any) to exit before the set is restored."""
    if name is None:
        return
    proc = services.procs.pop(name)
    try:
        proc.wait(60)
    except Exception:  # noqa: BLE001 - whatever the wait raised, the worker is killed
        proc.kill()


def _worker_running(services, thread: str, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for name in WORKERS:
            text = (services.log_dir / f"{name}.log").read_text()
            if any("step started" in line and f"thread_id={thread}" in line for line in text.splitlines()):
                return name
        time.sleep(0.05)
    raise AssertionError("no worker started the step")


async def test_processor_state_survives_a_step_moving_to_another_worker(services, settings, model, cluster):
    thread = f"th-move-{uuid.uuid4().hex[:6]}"
    model.queue([ms.tool_calls(ms.tool_call("slow", {"seconds": 3})), ms.text("all done now")],
                model="threadline-stateful")
    moved_from = None
    with second_worker(services):
        try:
            await asyncio.sleep(3)  # let the group settle with two members
            async with ThreadlineClient(settings) as tl:
                sub = await tl.subscribe_to_thread("res-1", thread)
                sent = await tl.stream("go", agent_id="stateful", resource_id="res-1", thread_id=thread)
                run_id = (await sent.accepted).run_id
                moved_from = await asyncio.to_thread(_worker_running, services, thread)
                services.procs[moved_from].send_signal(signal.SIGTERM)  # drains step 0, leaves the group
                chunks = await collect_run(sub, timeout_s=90)
                await sub.unsubscribe()
            assert chunks[-1]["payload"]["finishReason"] == "stop"
            served: dict[str, list[str]] = {}
            for _ in range(100):  # "step done" is logged just after the finish chunk is acknowledged
                served = {name: [line for line in (services.log_dir / f"{name}.log").read_text().splitlines()
                                 if "step done" in line and f"thread_id={thread}" in line]
                          for name in WORKERS}
                if sum(map(len, served.values())) >= 2:
                    break
                await asyncio.sleep(0.1)
            assert len(served[moved_from]) == 1 and "step=0" in served[moved_from][0]
            other = next(n for n in served if n != moved_from)
            assert len(served[other]) == 1 and "step=1" in served[other][0]
            state = (await run_row(cluster.dsn, run_id))["state"]["processor_state"]["chunk-counter"]
            (s0, c0), (s1, c1) = state["per_step"]
            assert (s0, s1) == (0, 1) and 0 < c0 < c1  # step 1 went on from step 0's count
            assert state["count"] > c1
            assert [c["seq"] for c in chunks] == list(range(chunks[0]["seq"], chunks[0]["seq"] + len(chunks)))
        finally:
            _wait_exit(services, moved_from)

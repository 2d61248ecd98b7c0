"""Two processor-workers in one consumer group share the runs of different threads."""

from __future__ import annotations

import asyncio
import time
import uuid

from tests.e2e.helpers import collect_run
from threadline.client import ThreadlineClient


def _steps_done(path, threads: list[str]) -> int:
    lines = [line for line in path.read_text().splitlines() if "step done" in line]
    return sum(1 for t in threads if any(f"thread_id={t} " in line or line.endswith(f"thread_id={t}")
                                         for line in lines))


async def test_two_workers_in_one_group_serve_runs_of_different_threads(services, settings, model):
    services.start("processor_worker", "processor_worker-2")
    try:
        await asyncio.to_thread(services.wait_log, "processor_worker-2", "partitions assigned")
        threads = [f"th-scale-{uuid.uuid4().hex[:6]}-{i}" for i in range(16)]
        async with ThreadlineClient(settings) as tl:
            subs = [await tl.subscribe_to_thread("res-1", t) for t in threads]
            sent = [await tl.send_message(f"hello {i}", agent_id="echo-agent", resource_id="res-1", thread_id=t)
                    for i, t in enumerate(threads)]
            accepted = [await s.accepted for s in sent]
            assert {a.action for a in accepted} == {"wake"}
            runs = await asyncio.gather(*(collect_run(s) for s in subs))
            for sub in subs:
                await sub.unsubscribe()
        assert all(r[-1]["payload"]["finishReason"] == "stop" for r in runs)
        served: dict[str, int] = {}
        deadline = time.monotonic() + 30
        while sum(served.values()) < len(threads) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)  # "step done" is logged just after the finish chunk is acked
            served = {w: _steps_done(services.log_dir / f"{w}.log", threads)
                      for w in ("processor_worker-1", "processor_worker-2")}
        assert sum(served.values()) == len(threads) and all(n > 0 for n in served.values()), served
        assert all(services.alive().values())
    finally:
        services.stop("processor_worker-2")

"""Ingress starts a fresh run (docs/decisions.md 34-36): the transaction that wakes an
idle thread and creates its run schedules step 0 by the orchestrator's own rule and publishes the
step task itself; the orchestrator is told with a ``StartRun`` marked ``scheduled`` and only
announces the start.

(a) a fresh run's step 0 task comes from ingress (the ``StartRun`` says ``scheduled``), and its
    chunks and lifecycle events are those of the same run with ``THREADLINE_INGRESS_STARTS=0``;
(b) kill -9 of ingress between its commit and the publishing of what it queued: the outbox relay
    publishes the step task and the ``StartRun``, the run completes once, step 0 runs once;
(c) kill -9 of the worker that received step 0's task before it claimed the step: the task is
    redelivered, the run completes once, step 0 runs once (attempt 1), no sweeper recovery;
(d) an abort before step 0 starts ends the run with ``abort`` + ``finish``, the model is never
    asked, and the start is announced before ``run_aborted``; a turn queued behind a run still
    starts from the orchestrator when that run ends.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from tests.e2e.checker import Figures, check_stream, clean
from tests.e2e.helpers import collect_run, rows, run_row, swapped_service, wait_idle
from tests.e2e.records import read_all
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms
from threadline.testing.harness import wait_file
from threadline.topics import Topics

START = ["thread_active", "run_started"]


async def _script(model: Any, thread: str, *steps: Any) -> None:
    for n, script in enumerate(steps):
        await model.aqueue([script], model=f"threadline-chaos-{thread}-s{n}")


async def _mine(cluster: Any, topic: str, run_id: str) -> list[dict[str, Any]]:
    return [e for e in await read_all(cluster.bootstrap, [topic], partitions=None) if e.get("run_id") == run_id]


async def _start_runs(cluster: Any, run_id: str) -> list[dict[str, Any]]:
    """The run's ``start_run`` commands on run-commands (duplicates by event id dropped)."""
    seen: dict[str, dict[str, Any]] = {}
    for e in await _mine(cluster, Topics(cluster.prefix).run_commands, run_id):
        if e["type"] == "start_run":
            seen.setdefault(e["event_id"], e)
    return list(seen.values())


async def _step_tasks(cluster: Any, run_id: str) -> list[tuple[int, int]]:
    """``(step, attempt)`` of the run's step tasks, duplicates by event id dropped."""
    seen = {e["event_id"]: (e["step"], e["attempt"])
            for e in await _mine(cluster, Topics(cluster.prefix).step_tasks, run_id)}
    return sorted(seen.values())


async def _lifecycle(cluster: Any, run_id: str, *, until: str, timeout_s: float = 20) -> list[str]:
    """The run's lifecycle event types in topic order (one partition: keyed by thread), once
    ``until`` is among them; duplicates by event id dropped."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen: dict[str, str] = {}
        for e in await _mine(cluster, f"{cluster.prefix}.lifecycle", run_id):
            seen.setdefault(e["event_id"], e["type"])
        types = list(seen.values())
        if until in types or time.monotonic() > deadline:
            return types
        await asyncio.sleep(0.3)


def _kept(run_id: str, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    fig = Figures()
    kept = clean(chunks, fig)[run_id]
    check_stream(run_id, kept, fig)
    assert fig.ok, fig.problems
    return kept


async def _one_run(settings: Any, model: Any, thread: str, text: str = "hello from step zero") -> tuple[str, list]:
    await _script(model, thread, ms.text(text))
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        run_id = (await (await tl.stream("go", agent_id="chaos", resource_id="res-1", thread_id=thread)).accepted).run_id
        chunks = await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
    return run_id, chunks


def _shape(kept: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(c["type"], c["step"], c["attempt"], (c.get("payload") or {}).get("text")) for c in kept]


async def test_a_fresh_runs_step_zero_is_scheduled_by_ingress(services, settings, model, cluster):
    thread = f"th-istart-a-{uuid.uuid4().hex[:6]}"
    run_id, chunks = await _one_run(settings, model, thread)
    kept = _kept(run_id, chunks)
    starts = await _start_runs(cluster, run_id)
    assert [s["scheduled"] for s in starts] == [True]  # the orchestrator only announced the start
    assert await _step_tasks(cluster, run_id) == [(0, 1)]
    life = await _lifecycle(cluster, run_id, until="run_finished")
    assert life == [*START, "step_finished", "run_finished"]
    row = await run_row(cluster.dsn, run_id)
    assert row["status"] == "finished" and row["start_announced"] and row["attempt"] == 1
    assert await wait_idle(cluster.dsn, thread)

    # the same run started through the orchestrator: the same stream and the same events
    base_thread = f"th-istart-a0-{uuid.uuid4().hex[:6]}"
    with swapped_service(services, "ingress", "nostart", kill=True, THREADLINE_INGRESS_STARTS="0"):
        base_id, base_chunks = await _one_run(settings, model, base_thread)
    assert [s["scheduled"] for s in await _start_runs(cluster, base_id)] == [False]
    assert await _step_tasks(cluster, base_id) == [(0, 1)]
    assert _shape(kept) == _shape(_kept(base_id, base_chunks))
    assert await _lifecycle(cluster, base_id, until="run_finished") == life


async def test_b_ingress_killed_after_its_commit_the_relay_starts_the_run(services, settings, model, cluster,
                                                                          tmp_path):
    thread = f"th-istart-b-{uuid.uuid4().hex[:6]}"
    pause_file = tmp_path / "paused"
    await _script(model, thread, ms.text("started by the relay"))
    with swapped_service(services, "ingress", "armed", kill=True, THREADLINE_PAUSE_POINTS="ingress_after_commit",
                         THREADLINE_PAUSE_FILE=str(pause_file)):
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            sent = await tl.stream("go", agent_id="chaos", resource_id="res-1", thread_id=thread)
            await asyncio.to_thread(wait_file, pause_file, "ingress_after_commit", 30)
            services.kill("ingress-armed")  # kill -9: committed, nothing published
            services.start("ingress", "ingress-1")  # the request is redelivered: a duplicate, answered again
            run_id = (await sent.accepted).run_id
            chunks = await collect_run(sub, timeout_s=90)
            await sub.unsubscribe()
    kept = _kept(run_id, chunks)
    assert [c["type"] for c in kept].count("finish") == 1
    assert "".join(c["payload"]["text"] for c in kept if c["type"] == "text-delta") == "started by the relay"
    row = await run_row(cluster.dsn, run_id)
    assert row["status"] == "finished" and row["attempt"] == 1 and row["steps_done"] == 1
    assert len(model.requests(model=f"threadline-chaos-{thread}-s0")) == 1  # step 0 ran once
    assert await _step_tasks(cluster, run_id) == [(0, 1)]
    assert [s["scheduled"] for s in await _start_runs(cluster, run_id)] == [True]
    assert await _lifecycle(cluster, run_id, until="run_finished") == [*START, "step_finished", "run_finished"]
    assert await rows(cluster.dsn, "SELECT * FROM run_recoveries WHERE run_id = $1", run_id) == []
    assert len(await rows(cluster.dsn, "SELECT * FROM runs WHERE thread_id = $1", thread)) == 1
    assert await wait_idle(cluster.dsn, thread)


async def test_c_worker_killed_before_it_claims_step_zero_the_task_is_redelivered(services, settings, model,
                                                                                  cluster, tmp_path):
    thread = f"th-istart-c-{uuid.uuid4().hex[:6]}"
    pause_file = tmp_path / "paused"
    await _script(model, thread, ms.text("claimed after the crash"))
    with swapped_service(services, "processor_worker", "armed", kill=True,
                         THREADLINE_PAUSE_POINTS="before_step_claim", THREADLINE_PAUSE_FILE=str(pause_file)):
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            sent = await tl.stream("go", agent_id="chaos", resource_id="res-1", thread_id=thread)
            run_id = (await sent.accepted).run_id
            await asyncio.to_thread(wait_file, pause_file, "before_step_claim", 30)
            services.start("processor_worker", "processor_worker-1")
            services.kill("processor_worker-armed")  # kill -9: the task received, the step not claimed
            chunks = await collect_run(sub, timeout_s=90)
            await sub.unsubscribe()
    kept = _kept(run_id, chunks)
    assert [c["type"] for c in kept].count("finish") == 1
    assert not any(c["type"] == "attempt-discarded" for c in chunks)  # nothing of step 0 ran before the kill
    row = await run_row(cluster.dsn, run_id)
    assert row["status"] == "finished" and row["attempt"] == 1 and row["steps_done"] == 1
    assert len(model.requests(model=f"threadline-chaos-{thread}-s0")) == 1
    assert await _step_tasks(cluster, run_id) == [(0, 1)]  # redelivered, not rescheduled by the sweeper
    assert await rows(cluster.dsn, "SELECT * FROM run_recoveries WHERE run_id = $1", run_id) == []
    assert await wait_idle(cluster.dsn, thread)


async def test_d_an_abort_before_step_zero_starts_and_a_queued_turn_behind_it(services, settings, model, cluster):
    thread = f"th-istart-d-{uuid.uuid4().hex[:6]}"
    await model.aqueue([ms.text("the queued turn answers")], model=f"threadline-chaos-{thread}-s0")
    services.stop("processor_worker-1")  # nobody claims step 0 until the abort is in
    try:
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            run_id = (await (await tl.stream("go", agent_id="chaos", resource_id="res-1",
                                             thread_id=thread)).accepted).run_id
            queued = await (await tl.queue_message("and then this", agent_id="chaos", resource_id="res-1",
                                                   thread_id=thread)).accepted
            assert queued.run_id != run_id
            assert await sub.abort() is True
            services.start("processor_worker", "processor_worker-1")
            chunks = await collect_run(sub, timeout_s=90, runs=2)
            await sub.unsubscribe()
    finally:
        if "processor_worker-1" not in services.procs:
            services.start("processor_worker", "processor_worker-1")
    aborted = _kept(run_id, chunks)
    assert [c["type"] for c in aborted][-2:] == ["abort", "finish"]
    assert not any(c["type"] == "text-delta" for c in aborted)
    assert (await run_row(cluster.dsn, run_id))["status"] == "aborted"
    assert await _lifecycle(cluster, run_id, until="run_aborted") == [*START, "run_aborted"]
    # the queued turn: started by the orchestrator (a handover), answered by the model's only reply
    after = _kept(queued.run_id, chunks)
    assert "".join(c["payload"]["text"] for c in after if c["type"] == "text-delta") == "the queued turn answers"
    assert [s["scheduled"] for s in await _start_runs(cluster, queued.run_id)] == [False]
    assert await _lifecycle(cluster, queued.run_id, until="run_finished") == ["run_started", "step_finished",
                                                                              "run_finished"]
    assert len(model.requests(model=f"threadline-chaos-{thread}-s0")) == 1
    assert await wait_idle(cluster.dsn, thread)

"""The worker continues the run (docs/decisions.md 31-33): a step that ends with
``continue`` is stored with the run's next step claimed for the same worker, in one statement,
and the worker runs it without a round trip through the orchestrator; the orchestrator only
announces the step and stays the owner of recovery.

(a) a three-step run crosses the orchestrator for its first step only (one step task on the
    step-tasks topic), and its chunks, lifecycle events, usage and step numbers are those of the
    same run with ``THREADLINE_WORKER_CONTINUES=0``;
(b) kill -9 of the worker in the middle of a continued step: the step task it was handling is
    redelivered, stands for the chain and takes the step over; the run finishes once;
(c) a message sent while a step runs is delivered at the next step (continued, not skipped);
    an abort while a continued step runs, or exactly at the boundary after the next step was
    claimed, ends the run there;
(d) the worker announces the continued steps itself (decision 103): with the orchestrator away a
    run's start and continued steps are announced, in order, and none of their results waits for it.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from typing import Any

from tests.e2e.checker import Figures, check_stream, clean
from tests.e2e.helpers import (
    WORKERS,
    collect_run,
    execute,
    own_instances,
    rows,
    run_row,
    second_worker,
    start_and_read_until,
    swapped_service,
    wait_idle,
    worker_of,
)
from tests.e2e.records import read_all, read_lifecycle
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms
from threadline.testing.harness import wait_file
from threadline.topics import Topics

WORDS = " ".join(f"w{i}" for i in range(10))


async def _effects_table(dsn: str) -> None:
    await execute(dsn, "CREATE TABLE IF NOT EXISTS chaos_effects (run_id text, tool_call_id text, "
                       "idempotency_key text, pid integer, at timestamptz DEFAULT now())")


async def _script(model: Any, thread: str, steps: list[Any]) -> None:
    """Step N of the chaos agent's run on ``thread`` asks ``threadline-chaos-<thread>-s<N>``."""
    for n, script in enumerate(steps):
        await model.aqueue(script if isinstance(script, list) else [script], model=f"threadline-chaos-{thread}-s{n}")


async def _step_tasks(cluster: Any, run_id: str) -> list[int]:
    """The steps of the step tasks published for ``run_id`` (by the orchestrator or the sweeper)."""
    tasks = await read_all(cluster.bootstrap, [Topics(cluster.prefix).step_tasks], partitions=None)
    return sorted(t["step"] for t in tasks if t.get("run_id") == run_id)


async def _lifecycle(cluster: Any, run_id: str, *, until: str, timeout_s: float = 20) -> list[tuple[str, Any]]:
    """``(type, step)`` of the run's lifecycle events, once ``until`` is among them."""
    deadline = time.monotonic() + timeout_s
    while True:
        events = await read_lifecycle(cluster.bootstrap, f"{cluster.prefix}.lifecycle")
        mine = [(e["type"], e.get("step")) for e in events if e.get("run_id") == run_id]
        if any(t == until for t, _ in mine) or time.monotonic() > deadline:
            return mine
        await asyncio.sleep(0.3)


def _kept(run_id: str, chunks: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Figures]:
    fig = Figures()
    kept = clean(chunks, fig)[run_id]
    check_stream(run_id, kept, fig)
    assert fig.ok, fig.problems
    return kept, fig


async def _three_steps(settings: Any, model: Any, cluster: Any, thread: str,
                       idle: bool = True) -> tuple[str, list[dict[str, Any]]]:
    """A run of the chaos agent on ``thread``: two tool steps, then text; its chunks up to its
    ``finish``, and (``idle``) once the thread is idle again."""
    await _script(model, thread, [ms.tool_calls(ms.tool_call("chaos_effect", {"n": 1})),
                                  ms.tool_calls(ms.tool_call("chaos_effect", {"n": 2})),
                                  ms.text("all done now")])
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        run_id = (await (await tl.stream("go", agent_id="chaos", resource_id="res-1", thread_id=thread)).accepted).run_id
        chunks = await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
    assert not idle or await wait_idle(cluster.dsn, thread)
    return run_id, chunks


def _shape(kept: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must not depend on who scheduled the steps: types, steps, attempts and the texts."""
    return [(c["type"], c["step"], c["attempt"], (c.get("payload") or {}).get("text")) for c in kept]


async def test_a_continued_run_crosses_the_orchestrator_for_its_first_step_only(services, settings, model, cluster):
    await _effects_table(cluster.dsn)
    thread = f"th-cont-a-{uuid.uuid4().hex[:6]}"
    run_id, chunks = await _three_steps(settings, model, cluster, thread)
    kept, _ = _kept(run_id, chunks)
    assert await _step_tasks(cluster, run_id) == [0]  # steps 1 and 2: claimed by the worker that stored 0 and 1
    life = await _lifecycle(cluster, run_id, until="run_finished")
    row = await run_row(cluster.dsn, run_id)
    assert row["status"] == "finished" and row["steps_done"] == 3 and row["results_applied"] == 3
    assert [r["action"] for r in await rows(cluster.dsn, "SELECT action FROM run_recoveries WHERE run_id = $1",
                                            run_id)] == []

    # the same run through the orchestrator (the worker does not continue): the same stream and events
    base_thread = f"th-cont-a0-{uuid.uuid4().hex[:6]}"
    with swapped_service(services, "processor_worker", "nocont", THREADLINE_WORKER_CONTINUES="0"):
        base_id, base_chunks = await _three_steps(settings, model, cluster, base_thread)
    base_kept, _ = _kept(base_id, base_chunks)
    assert await _step_tasks(cluster, base_id) == [0, 1, 2]
    base_life = await _lifecycle(cluster, base_id, until="run_finished")
    assert _shape(kept) == _shape(base_kept)
    assert [c["type"] for c in kept].count("finish") == 1
    usage = kept[-1]["payload"]["output"]["usage"]
    assert usage and usage == base_kept[-1]["payload"]["output"]["usage"]  # summed over the three steps, as before
    assert sorted(life, key=str) == sorted(base_life, key=str)
    assert [s for t, s in life if t == "step_finished"] == [0, 1, 2]
    assert [t for t, _ in life].count("run_finished") == 1
    base_row = await run_row(cluster.dsn, base_id)
    assert row["usage"] == base_row["usage"] and row["text"] == base_row["text"] == "all done now"


async def test_with_the_orchestrator_away_the_worker_announces_the_start_and_the_continued_steps(
        services, settings, model, cluster):
    """Decision 103: the worker that stores a continued step announces it itself when the
    orchestrator would only announce it. With the orchestrator stopped, the run's start (ingress
    scheduled step 0) and steps 0 and 1 are announced by the worker alone, in order, and no result
    of theirs goes to the orchestrator; once it is back it ends the run on step 2's result and
    announces nothing twice (its late ``StartRun`` finds the start announced)."""
    await _effects_table(cluster.dsn)
    thread = f"th-cont-ann-{uuid.uuid4().hex[:6]}"
    with own_instances(services, "run_orchestrator", "run_orchestrator-1"):
        run_id, chunks = await _three_steps(settings, model, cluster, thread, idle=False)
        life = await _lifecycle(cluster, run_id, until="never", timeout_s=2)
        assert life == [("thread_active", None), ("run_started", None), ("step_finished", 0), ("step_finished", 1)]
        results = await read_all(cluster.bootstrap, [Topics(cluster.prefix).step_results], partitions=None)
        assert [r["step"] for r in results if r.get("run_id") == run_id] == [2]  # the run's end, waiting
    _kept(run_id, chunks)
    assert await wait_idle(cluster.dsn, thread, timeout_s=30)
    life = await _lifecycle(cluster, run_id, until="run_finished")
    assert life == [("thread_active", None), ("run_started", None), ("step_finished", 0), ("step_finished", 1),
                    ("step_finished", 2), ("run_finished", None)]
    row = await run_row(cluster.dsn, run_id)
    assert row["status"] == "finished" and row["results_applied"] == 3 and row["start_announced"]


async def test_kill_9_mid_continued_step_the_redelivered_task_takes_it_over(services, settings, model, cluster):
    await _effects_table(cluster.dsn)
    thread = f"th-cont-b-{uuid.uuid4().hex[:6]}"
    await _script(model, thread, [ms.tool_calls(ms.tool_call("chaos_effect", {"n": 1})),
                                  ms.text(WORDS, chunk_delay=0.5, times=2)])
    with second_worker(services):
        async with ThreadlineClient(settings) as tl:
            sub, run_id, chunks = await start_and_read_until(  # until the continued step streams
                tl, thread, lambda c: c["type"] == "text-delta" and c["step"] == 1)
            running = worker_of(services, thread)
            assert running is not None
            services.kill(running)  # kill -9 in the middle of step 1, which no step task names
            chunks += await collect_run(sub, timeout_s=120)
            await sub.unsubscribe()
    kept, fig = _kept(run_id, chunks)
    assert fig.discarded_attempts == 1  # the killed attempt of step 1
    assert [c["type"] for c in kept].count("finish") == 1
    assert "".join(c["payload"]["text"] for c in kept if c["type"] == "text-delta" and c["step"] == 1) == WORDS
    row = await run_row(cluster.dsn, run_id)
    assert row["status"] == "finished" and row["step"] == 1 and row["attempt"] == 2
    assert len(model.requests(model=f"threadline-chaos-{thread}-s0")) == 1  # step 0 was not executed again
    assert len(model.requests(model=f"threadline-chaos-{thread}-s1")) == 2
    assert len(await rows(cluster.dsn, "SELECT * FROM chaos_effects WHERE run_id = $1", run_id)) == 1
    # recovered by the redelivered task of step 0, not by a new step task nor the sweeper
    assert await _step_tasks(cluster, run_id) == [0]
    assert await rows(cluster.dsn, "SELECT * FROM run_recoveries WHERE run_id = $1", run_id) == []
    assert await wait_idle(cluster.dsn, thread)


async def test_a_message_sent_during_a_step_is_delivered_at_the_next_step(services, settings, model, cluster):
    thread = f"th-cont-c-{uuid.uuid4().hex[:6]}"
    await _script(model, thread, [ms.text(WORDS, chunk_delay=0.3), ms.text("got it")])
    async with ThreadlineClient(settings) as tl:
        sub, run_id, chunks = await start_and_read_until(tl, thread, lambda c: c["type"] == "text-delta")
        sent = await (await tl.send_message("and one more thing", agent_id="chaos", resource_id="res-1",
                                            thread_id=thread)).accepted
        assert (sent.action, sent.run_id) == ("deliver", run_id)
        chunks += await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
    kept, _ = _kept(run_id, chunks)
    echoes = [c for c in kept if c["type"] == "data-user-message" and "and one more thing" in str(c["data"])]
    assert [c["step"] for c in echoes] == [1]  # at the next step boundary, as before
    finishes = [c for c in kept if c["type"] == "step-finish"]
    assert [c["step"] for c in finishes] == [0, 1]
    assert "and one more thing" in str(model.requests(model=f"threadline-chaos-{thread}-s1")[0])
    assert await _step_tasks(cluster, run_id) == [0]  # step 1 (the delivery) was continued by the worker
    assert (await run_row(cluster.dsn, run_id))["status"] == "finished"
    life = await _lifecycle(cluster, run_id, until="run_finished")
    assert [s for t, s in life if t == "step_finished"] == [0, 1]
    assert await wait_idle(cluster.dsn, thread)


async def test_an_abort_during_a_continued_step_ends_the_run_there(services, settings, model, cluster):
    await _effects_table(cluster.dsn)
    thread = f"th-cont-d-{uuid.uuid4().hex[:6]}"
    await _script(model, thread, [ms.tool_calls(ms.tool_call("chaos_effect", {"n": 1})),
                                  ms.tool_calls(ms.tool_call("chaos_effect", {"n": 2}), ttft=5),
                                  ms.text("never")])
    async with ThreadlineClient(settings) as tl:
        sub, run_id, chunks = await start_and_read_until(
            tl, thread, lambda c: c["type"] == "step-start" and c["step"] == 1)
        assert await sub.abort() is True
        chunks += await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
    kept, _ = _kept(run_id, chunks)
    assert [c["type"] for c in kept][-2:] == ["abort", "finish"]
    assert [c["type"] for c in kept].count("finish") == 1
    assert not any(c["step"] >= 2 for c in kept)
    assert (await run_row(cluster.dsn, run_id))["status"] == "aborted"
    assert await _step_tasks(cluster, run_id) == [0]  # step 1 was a continued step
    await asyncio.sleep(1.0)
    assert model.requests(model=f"threadline-chaos-{thread}-s2") == []  # the run did not go past the abort
    assert len(await rows(cluster.dsn, "SELECT * FROM chaos_effects WHERE run_id = $1", run_id)) == 1
    assert await wait_idle(cluster.dsn, thread)


async def test_an_abort_at_the_boundary_stops_the_claimed_next_step(services, settings, model, cluster, tmp_path):
    await _effects_table(cluster.dsn)
    pause_file = tmp_path / "paused"
    thread = f"th-cont-e-{uuid.uuid4().hex[:6]}"
    await _script(model, thread, [ms.tool_calls(ms.tool_call("chaos_effect", {"n": 1})), ms.text("never")])
    # the worker holds for 4 s right after it stored step 0 and claimed step 1 (one commit); only
    # for this thread: the new worker also takes over steps earlier tests left behind (CI, 12-03)
    with swapped_service(services, "processor_worker", "boundary", THREADLINE_PAUSE_POINTS="after_step_result_stored",
                         THREADLINE_PAUSE_FILE=str(pause_file), THREADLINE_PAUSE_SECONDS="4",
                         THREADLINE_PAUSE_MATCH=thread):
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            run_id = (await (await tl.stream("go", agent_id="chaos", resource_id="res-1",
                                             thread_id=thread)).accepted).run_id
            await asyncio.to_thread(wait_file, pause_file, "after_step_result_stored", 30)
            claimed = (await rows(cluster.dsn, "SELECT * FROM runs WHERE run_id = $1", run_id))[0]
            assert (claimed["step"], claimed["steps_done"], claimed["step_started"]) == (1, 1, True)
            assert await tl.abort(resource_id="res-1", thread_id=thread) is True
            chunks = await collect_run(sub, timeout_s=60)
            await sub.unsubscribe()
            assert await wait_idle(cluster.dsn, thread)
    kept, _ = _kept(run_id, chunks)
    assert [c["type"] for c in kept][-2:] == ["abort", "finish"]
    assert [c["type"] for c in kept].count("finish") == 1
    assert (await run_row(cluster.dsn, run_id))["status"] == "aborted"
    assert model.requests(model=f"threadline-chaos-{thread}-s1") == []  # the claimed step never ran


def _budget_lines(services: Any, run_id: str, marker: str) -> list[dict[str, str]]:
    """The fields of the workers' ``marker`` log lines of ``run_id``."""
    out = []
    for name in WORKERS:
        path = services.log_dir / f"{name}.log"
        for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
            if f"] {marker} " in line and f"run_id={run_id}" in line:  # not "step started"
                out.append(dict(re.findall(r"\b(\w+)=(\S+)", line)))
    return out


async def test_the_worker_logs_where_a_step_start_and_a_step_gap_went(services, settings, model, cluster):
    """The latency budget's log lines (decisions 38 and 84): a step begun from its step task has
    one ``step start`` line (claim, setup, the model call's open, its first text; the segments
    up to the last point reached when the step streams no text); each step the worker continues
    has a ``step gap`` line instead."""
    await _effects_table(cluster.dsn)
    thread = f"th-cont-f-{uuid.uuid4().hex[:6]}"
    await _script(model, thread, [ms.text("a short answer")])
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        text_run = (await (await tl.stream("go", agent_id="chaos", resource_id="res-1",
                                           thread_id=thread)).accepted).run_id
        await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
    assert await wait_idle(cluster.dsn, thread)
    tool_run, _ = await _three_steps(settings, model, cluster, f"th-cont-g-{uuid.uuid4().hex[:6]}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (_budget_lines(services, text_run, "step start")
                                               and len(_budget_lines(services, tool_run, "step gap")) == 2):
        await asyncio.sleep(0.2)

    [start] = _budget_lines(services, text_run, "step start")
    parts = [float(start[k]) for k in ("claim_ms", "setup_ms", "model_open_ms", "first_text_ms")]
    assert start["step"] == "0" and all(p >= 0 for p in parts)
    assert abs(sum(parts) - float(start["total_ms"])) < 0.01
    assert _budget_lines(services, text_run, "step gap") == []

    [tool_start] = _budget_lines(services, tool_run, "step start")  # step 0: tool calls, no text
    assert tool_start["step"] == "0" and {"claim_ms", "setup_ms", "model_open_ms"} <= set(tool_start)
    assert "first_text_ms" not in tool_start and "total_ms" not in tool_start
    assert sorted(g["step"] for g in _budget_lines(services, tool_run, "step gap")) == ["1", "2"]

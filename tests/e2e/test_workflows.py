"""Durable workflows on the cluster (docs/workflows.md): the model of ``shipper`` calls the tool
``workflow-ship`` (a sequence, a parallel pair and a branch, tests/e2e/agents/workflows.py);
its progress streams as ``data-workflow-*`` chunks, its output is the tool's result, a failing
step is a tool error naming it. ``kill -9`` of the worker while a workflow step runs: the run
finishes once, every step that had finished ran exactly once, the running one at most twice (the
second time in the new worker); ``kill -9`` of the orchestrator mid-workflow: every step once.
The exactly-once checker (tests/e2e/checker.py) reads the chunk topic from offset 0 and the
lifecycle topic."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from tests.e2e.checker import TERMINAL_LIFECYCLE, check_runs
from tests.e2e.helpers import collect_run, content, execute, kept_chunks, rows, run_row, wait_idle
from tests.e2e.records import read_all
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms
from threadline.testing.harness import wait_file
from threadline.topics import Topics

STEPS = ("reserve", "charge", "label", "courier", "summary")
"""The steps an express order runs."""


async def _setup(cluster: Any, model: Any, thread: str, args: dict[str, Any]) -> None:
    await execute(cluster.dsn, "CREATE TABLE IF NOT EXISTS wf_effects (run_id text, tool_call_id text, step text, "
                               "idempotency_key text, pid integer, at timestamptz DEFAULT now())")
    await model.aqueue([ms.tool_calls(ms.tool_call("workflow-ship", args), times=3)], model=f"threadline-wf-{thread}-s0")
    await model.aqueue([ms.text("shipped it", times=3)], model=f"threadline-wf-{thread}-s1")


async def _start(tl: ThreadlineClient, thread: str) -> tuple[Any, str]:
    sub = await tl.subscribe_to_thread("res-wf", thread)
    sent = await tl.stream("ship my order", agent_id="shipper", resource_id="res-wf", thread_id=thread)
    return sub, (await sent.accepted).run_id


async def _effects(cluster: Any, run_id: str) -> list[Any]:
    return await rows(cluster.dsn, "SELECT step, tool_call_id, idempotency_key, pid FROM wf_effects WHERE run_id = $1",
                      run_id)


async def _journal(cluster: Any, run_id: str) -> dict[str, Any]:
    return {r["path"]: r for r in await rows(cluster.dsn, "SELECT * FROM workflow_steps WHERE run_id = $1", run_id)}


async def _check(settings: Any, cluster: Any, thread: str, run_id: str, killed: set[int]) -> None:
    """The checker over the thread's chunk topic from offset 0 and the lifecycle topic; the tool
    call's side effect is the workflow's last step (``summary``)."""
    topics = Topics(settings.topic_prefix)
    replay = await read_all(settings.kafka_bootstrap, [topics.chunks("res-wf", thread)])
    lifecycle: list[dict[str, Any]] = []
    for _ in range(60):  # the orchestrator announces the run's end just after its finish chunk
        lifecycle = await read_all(settings.kafka_bootstrap, [topics.lifecycle], partitions=settings.partitions)
        if any(e.get("run_id") == run_id and e.get("type") in TERMINAL_LIFECYCLE for e in lifecycle):
            break
        await asyncio.sleep(0.5)
    runs = {r["run_id"]: r for r in await rows(cluster.dsn, "SELECT * FROM runs WHERE run_id = $1", run_id)}
    stored = {run_id: list(await rows(cluster.dsn, "SELECT role FROM messages WHERE run_id = $1 ORDER BY position",
                                      run_id))}
    effects = [{"run_id": run_id, "tool_call_id": r["tool_call_id"], "pid": r["pid"]}
               for r in await _effects(cluster, run_id) if r["step"] == "summary"]
    fig = check_runs(observed=[replay], run_ids=[run_id], runs=runs, messages=stored, lifecycle=lifecycle,
                     effects=effects, killed_pids=killed)
    assert fig.ok, fig.problems
    assert fig.tool_calls == 1 and fig.tool_executions == 1


def _each_step_once_but_reruns_in(effects: list[Any], killed: set[int]) -> Counter[str]:
    """Every step of an express order ran; a step ran more than once only where every extra run
    is one the killed process made. Returns the executions per step."""
    per_step = Counter(r["step"] for r in effects)
    assert set(per_step) == set(STEPS), per_step
    for step, n in per_step.items():
        in_killed = sum(1 for r in effects if r["step"] == step and r["pid"] in killed)
        assert n - 1 <= in_killed, f"step {step} ran {n} times, {in_killed} in the killed worker"
    assert len({r["idempotency_key"] for r in effects}) == len(STEPS)  # one key per step, across attempts
    return per_step


async def test_a_workflow_runs_as_a_tool_streams_its_progress_and_records_each_step(services, settings, model,
                                                                                    cluster):
    thread = f"th-wf-{uuid.uuid4().hex[:6]}"
    await _setup(cluster, model, thread, {"order_id": "o-1", "express": True})
    async with ThreadlineClient(settings) as tl:
        sub, run_id = await _start(tl, thread)
        chunks = await collect_run(sub, timeout_s=90)
        await sub.unsubscribe()
    seq = content(chunks)
    expected = {"order_id": "o-1", "via": "courier", "total": 30, "label": "L-o-1"}
    results = [p for t, p in seq if t == "tool-result"]
    assert len(results) == 1 and results[0]["toolName"] == "workflow-ship" and results[0]["result"] == expected
    progress = [(t, d.get("stepId"), d.get("status")) for t, d in seq if t.startswith("data-workflow-")]
    starts = [s for t, s, _ in progress if t == "data-workflow-step-start"]
    assert starts[0] == "reserve" and sorted(starts[1:3]) == ["charge", "label"] and starts[3:] == ["courier", "summary"]
    assert [(s, st) for t, s, st in progress if t == "data-workflow-step-result"].count(("summary", "success")) == 1
    assert progress[-1] == ("data-workflow-finish", None, "success")
    assert next(d for t, d in seq if t == "data-workflow-finish")["output"] == expected
    assert seq[-1] == ("finish", "stop") and "".join(p for t, p in seq if t == "text-delta") == "shipped it"
    assert Counter(r["step"] for r in await _effects(cluster, run_id)) == dict.fromkeys(STEPS, 1)
    journal = await _journal(cluster, run_id)
    assert {p: (r["status"], r["runs"]) for p, r in journal.items()} == {
        "0/reserve": ("success", 1), "1/charge": ("success", 1), "1/label": ("success", 1),
        "2/:branch": ("success", 0), "2/courier": ("success", 1), "3/summary": ("success", 1)}
    assert journal["2/:branch"]["output"] == ["courier"] and journal["1/charge"]["output"] == {"total": 30}
    await _check(settings, cluster, thread, run_id, set())


async def test_a_failing_workflow_step_is_a_tool_error_naming_it_and_the_agent_goes_on(services, settings, model,
                                                                                      cluster):
    thread = f"th-wf-{uuid.uuid4().hex[:6]}"
    await _setup(cluster, model, thread, {"order_id": "fail-1"})
    async with ThreadlineClient(settings) as tl:
        sub, run_id = await _start(tl, thread)
        chunks = await collect_run(sub, timeout_s=90)
        await sub.unsubscribe()
    seq = content(chunks)
    errors = [p for t, p in seq if t == "tool-error"]
    assert len(errors) == 1 and "workflow ship-order: step charge failed: RuntimeError: card declined" in str(errors[0])
    assert seq[-1] == ("finish", "stop")
    steps = Counter(r["step"] for r in await _effects(cluster, run_id))
    assert steps == {"reserve": 1, "charge": 1, "label": 1}  # nothing after the failed element
    assert (await _journal(cluster, run_id))["1/charge"]["status"] == "failed"


async def test_kill_9_of_the_worker_mid_workflow_resumes_after_the_last_finished_step(services, settings, model,
                                                                                     cluster, tmp_path: Path):
    thread = f"th-wf-{uuid.uuid4().hex[:6]}"
    pause_file = tmp_path / "paused"
    await _setup(cluster, model, thread, {"order_id": "o-2", "express": True})
    services.stop("processor_worker-1")  # the armed worker takes every partition
    services.start("processor_worker", "processor_worker-armed", THREADLINE_PAUSE_POINTS="wf_charge_after_effect",
                   THREADLINE_PAUSE_FILE=str(pause_file), THREADLINE_PAUSE_MATCH=thread)
    killed = {services.pid("processor_worker-armed")}
    try:
        async with ThreadlineClient(settings) as tl:
            sub, run_id = await _start(tl, thread)
            await asyncio.to_thread(wait_file, pause_file, "wf_charge_after_effect", 60)
            before = await _journal(cluster, run_id)
            services.start("processor_worker", "processor_worker-1")
            services.kill("processor_worker-armed")  # kill -9 while `charge` runs (its effect made)
            chunks = await collect_run(sub, timeout_s=120)
            await sub.unsubscribe()
    finally:
        if "processor_worker-armed" in services.procs:
            services.kill("processor_worker-armed")
    assert before["0/reserve"]["status"] == "success" and before["1/charge"]["status"] == "running"
    kept = kept_chunks(chunks)
    assert any(c["type"] == "attempt-discarded" for c in chunks)
    replayed = [c["data"]["stepId"] for c in kept if c["type"] == "data-workflow-step-result" and c["data"].get("replayed")]
    assert "reserve" in replayed and "charge" not in replayed
    assert content(kept)[-1] == ("finish", "stop")
    result = next(p for t, p in content(kept) if t == "tool-result")
    assert result["result"] == {"order_id": "o-2", "via": "courier", "total": 30, "label": "L-o-2"}
    effects = await _effects(cluster, run_id)
    per_step = _each_step_once_but_reruns_in(effects, killed)
    assert per_step["reserve"] == 1 and per_step["courier"] == 1 and per_step["summary"] == 1
    assert per_step["charge"] == 2  # running at the kill: the only repeat, once
    journal = await _journal(cluster, run_id)
    assert journal["0/reserve"]["runs"] == 1 and journal["1/charge"]["runs"] == 2
    assert all(r["status"] == "success" for r in journal.values())
    run = await run_row(cluster.dsn, run_id)
    assert run["status"] == "finished"
    await _check(settings, cluster, thread, run_id, killed)
    assert await wait_idle(cluster.dsn, thread)


async def test_kill_9_of_the_orchestrator_mid_workflow_leaves_every_step_run_once(services, settings, model,
                                                                                  cluster, tmp_path: Path):
    thread = f"th-wf-{uuid.uuid4().hex[:6]}"
    pause_file, release = tmp_path / "paused", tmp_path / "release"
    await _setup(cluster, model, thread, {"order_id": "o-3", "express": True})
    services.stop("processor_worker-1")
    services.start("processor_worker", "processor_worker-held", THREADLINE_PAUSE_POINTS="wf_charge_after_effect",
                   THREADLINE_PAUSE_FILE=str(pause_file), THREADLINE_PAUSE_MATCH=thread,
                   THREADLINE_PAUSE_RELEASE=str(release))
    killed = {services.pid("run_orchestrator-1")}
    try:
        async with ThreadlineClient(settings) as tl:
            sub, run_id = await _start(tl, thread)
            await asyncio.to_thread(wait_file, pause_file, "wf_charge_after_effect", 60)
            services.kill("run_orchestrator-1")  # kill -9 while the workflow's `charge` step runs
            services.start("run_orchestrator", "run_orchestrator-1")
            release.touch()
            chunks = await collect_run(sub, timeout_s=120)
            await sub.unsubscribe()
    finally:
        if "processor_worker-held" in services.procs:
            services.stop("processor_worker-held")
        if "processor_worker-1" not in services.procs:
            services.start("processor_worker", "processor_worker-1")
        if "run_orchestrator-1" not in services.procs:
            services.start("run_orchestrator", "run_orchestrator-1")
    kept = kept_chunks(chunks)
    assert content(kept)[-1] == ("finish", "stop")
    assert Counter(r["step"] for r in await _effects(cluster, run_id)) == dict.fromkeys(STEPS, 1)
    assert all(r["runs"] <= 1 and r["status"] == "success" for r in (await _journal(cluster, run_id)).values())
    assert (await run_row(cluster.dsn, run_id))["status"] == "finished"
    await _check(settings, cluster, thread, run_id, killed)
    assert await wait_idle(cluster.dsn, thread)


async def test_a_stalled_worker_that_lost_its_step_records_no_workflow_step(services, settings, model, cluster,
                                                                            tmp_path: Path):
    """The worker running ``charge`` is frozen (SIGSTOP) and its step taken over; woken up, it
    finishes ``charge`` and tries to record it: the write is fenced, it runs no later step, and
    the journal keeps what the new owner recorded."""
    thread = f"th-wf-{uuid.uuid4().hex[:6]}"
    pause_file = tmp_path / "paused"
    await _setup(cluster, model, thread, {"order_id": "o-4", "express": True})
    services.stop("processor_worker-1")
    services.start("processor_worker", "processor_worker-stale", THREADLINE_PAUSE_POINTS="wf_charge_after_effect",
                   THREADLINE_PAUSE_FILE=str(pause_file), THREADLINE_PAUSE_MATCH=thread, THREADLINE_PAUSE_SECONDS="3")
    stale = services.procs["processor_worker-stale"]
    try:
        async with ThreadlineClient(settings) as tl:
            sub, run_id = await _start(tl, thread)
            await asyncio.to_thread(wait_file, pause_file, "wf_charge_after_effect", 60)
            os.kill(stale.pid, signal.SIGSTOP)  # its heartbeat stops: the step is taken over
            services.start("processor_worker", "processor_worker-1")
            chunks = await collect_run(sub, timeout_s=180)
            await sub.unsubscribe()
            journal_before = {p: dict(r) for p, r in (await _journal(cluster, run_id)).items()}
            os.kill(stale.pid, signal.SIGCONT)  # wakes inside `charge`, then tries to record its end
            await asyncio.to_thread(services.wait_log, "processor_worker-stale", "workflow step write fenced", 60)
    finally:
        if "processor_worker-stale" in services.procs:
            os.kill(stale.pid, signal.SIGCONT)
            services.kill("processor_worker-stale")
        if "processor_worker-1" not in services.procs:
            services.start("processor_worker", "processor_worker-1")
    assert content(kept_chunks(chunks))[-1] == ("finish", "stop")
    assert {p: dict(r) for p, r in (await _journal(cluster, run_id)).items()} == journal_before
    effects = await _effects(cluster, run_id)
    per_step = Counter(r["step"] for r in effects)
    assert per_step["charge"] == 2 and per_step["reserve"] == 1 and per_step["courier"] == 1 and per_step["summary"] == 1
    assert not [r for r in effects if r["pid"] == stale.pid and r["step"] in ("courier", "post", "summary")]
    await _check(settings, cluster, thread, run_id, {stale.pid})

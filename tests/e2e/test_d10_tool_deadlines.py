"""D10: a tool, or a workflow step, that never returns does not hold the thread for ever. Each call
runs under a deadline (``THREADLINE_TOOL_TIMEOUT_S``, here 5 s on the test's own worker; a tool's
``timeout_s`` overrides it): past it the call ends as a ``tool-error`` named ``ToolTimeoutError``
naming the tool and the limit, the model reads it as the call's result, and the run goes on to
``finish {stop}`` (decision 218). A plain ``def`` still sleeping in its thread does not keep its
worker from stopping on SIGTERM. Messages sent during the hang are delivered after it; an abort
during the hang ends the run at once."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from tests.e2e.agents.composition import SIDE_EFFECTS_DDL
from tests.e2e.helpers import collect_timed, content, execute, one_tool_run, rows, run_row, swapped_service, wait_idle
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms

TOOL_TIMEOUT_S = "5"


def _at(timed: list[tuple[float, dict[str, Any]]], kind: str) -> tuple[float, dict[str, Any]]:
    return next((t, c) for t, c in timed if c["type"] == kind)


async def _one(tl: ThreadlineClient, model: Any, tool: str, tag: str) -> dict[str, Any]:
    """One ``d10`` run: step 0 calls ``tool``, step 1 answers "ok"."""
    return await one_tool_run(tl, model, agent="d10", prefix="d10", tool=tool, tag=tag)


def _sent_result(model: Any, thread: str, call: str) -> str:
    [request] = model.requests(model=f"threadline-d10-{thread}-s1")
    [msg] = [m for m in request["body"]["messages"] if m.get("role") == "tool" and m.get("tool_call_id") == call]
    return msg["content"]


async def test_d10_tools_and_a_workflow_step_that_never_return_end_at_their_deadline(services, settings, model,
                                                                                    cluster):
    await execute(cluster.dsn, SIDE_EFFECTS_DDL)
    tag = uuid.uuid4().hex[:6]
    with swapped_service(services, "processor_worker", f"d10{tag}", THREADLINE_TOOL_TIMEOUT_S=TOOL_TIMEOUT_S) as worker:
        async with ThreadlineClient(settings) as tl:
            outs = {o["tool"]: o for o in await asyncio.gather(
                *(_one(tl, model, tool, tag) for tool in ("hang", "hang_sync", "quick", "workflow-wf")))}
        for tool, limit in (("hang", 5), ("hang_sync", 5), ("quick", 2)):  # (a), (b), (c)
            out = outs[tool]
            called, _ = _at(out["timed"], "tool-call")
            failed, chunk = _at(out["timed"], "tool-error")
            message = f"tool {tool} timed out after {limit} s"
            assert chunk["payload"]["error"] == {"name": "ToolTimeoutError", "message": message}, chunk
            assert abs(failed - called - limit) <= 1.0, (tool, failed - called)
            assert _sent_result(model, out["thread"], out["call"]) == message
            assert content(out["chunks"])[-1] == ("finish", "stop")
            assert [c["type"] for c in out["chunks"]].count("tool-result") == 0
            assert await wait_idle(cluster.dsn, out["thread"], timeout_s=15)
            assert (await run_row(cluster.dsn, out["run_id"]))["attempt"] == 1
        # (d) the hanging workflow step is recorded failed with the timeout; the step after it never runs
        out = outs["workflow-wf"]
        journal = {r["path"]: r for r in await rows(cluster.dsn, "SELECT * FROM workflow_steps WHERE run_id = $1",
                                                    out["run_id"])}
        assert {p: r["status"] for p, r in journal.items()} == {"0/s1": "success", "1/s2": "failed"}
        assert journal["1/s2"]["error"] == f"ToolTimeoutError: step s2 timed out after {TOOL_TIMEOUT_S} s"
        seq = content(out["chunks"])
        assert ("data-workflow-step-result", "s2", "failed") in [
            (t, d.get("stepId"), d.get("status")) for t, d in seq if t == "data-workflow-step-result"]
        [error] = [p["error"]["message"] for t, p in seq if t == "tool-error"]
        assert "step s2 failed" in error and "timed out after 5 s" in error, error
        assert seq[-1] == ("finish", "stop")
        effects = [r["k"] for r in await rows(cluster.dsn, "SELECT k FROM side_effects WHERE k LIKE '%:' || $1",
                                              out["run_id"])]
        assert effects == [f"wf10.s1:{out['run_id']}"]
        # (b) the hour-long sleep still runs in its thread: the worker stops on SIGTERM all the same
        proc = services.procs[worker]
        started = time.monotonic()
        services.stop(worker, timeout_s=15)
        assert proc.returncode == 0 and time.monotonic() - started < 15, (proc.returncode, time.monotonic() - started)
    # the late return never lands: one tool_calls row per call, the timeout's
    for out in outs.values():
        stored = await rows(cluster.dsn, "SELECT result, error FROM tool_calls WHERE run_id = $1", out["run_id"])
        assert len(stored) == 1 and stored[0]["result"] is None and "timed out" in stored[0]["error"], stored


async def test_d10_messages_sent_during_a_hang_come_after_it_and_an_abort_ends_it(services, settings, model, cluster):
    tag = uuid.uuid4().hex[:6]
    thread, call = f"th-d10f-{tag}", f"c-f-{tag}"
    await model.aqueue([ms.tool_calls(ms.tool_call("hang", {}, id=call))], model=f"threadline-d10-{thread}-s0")
    await model.aqueue([ms.text("yes, still here")], model=f"threadline-d10-{thread}-s1")
    await model.aqueue([ms.text("next done")], model=f"threadline-d10-{thread}-s0")  # the queued turn's step 0
    with swapped_service(services, "processor_worker", f"d10f{tag}", THREADLINE_TOOL_TIMEOUT_S=TOOL_TIMEOUT_S):
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            await tl.stream("call hang", agent_id="d10", resource_id="res-1", thread_id=thread)
            collected = asyncio.create_task(collect_timed(sub, runs=2, timeout_s=60))
            while not model.requests(model=f"threadline-d10-{thread}-s0"):
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # the tool hangs
            await tl.send_message("still there?", agent_id="d10", resource_id="res-1", thread_id=thread)
            await tl.queue_message("next", agent_id="d10", resource_id="res-1", thread_id=thread)
            timed = await collected
            await sub.unsubscribe()
            # a repetition of (a), aborted during the hang: the run ends within 2 s
            thread2, call2 = f"th-d10f2-{tag}", f"c-f2-{tag}"
            await model.aqueue([ms.tool_calls(ms.tool_call("hang", {}, id=call2))],
                               model=f"threadline-d10-{thread2}-s0")
            sub2 = await tl.subscribe_to_thread("res-1", thread2)
            await tl.stream("call hang", agent_id="d10", resource_id="res-1", thread_id=thread2)
            collected2 = asyncio.create_task(collect_timed(sub2, timeout_s=30))
            while not model.requests(model=f"threadline-d10-{thread2}-s0"):
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
            aborted_at = time.monotonic()
            assert await tl.abort(resource_id="res-1", thread_id=thread2) is True
            timed2 = await collected2
            await sub2.unsubscribe()
    chunks = [c for _, c in timed]
    seq = content(chunks)
    failed, _ = _at(timed, "tool-error")
    # the delivered message reached the run's next step, after the timeout, in the same run
    [second] = model.requests(model=f"threadline-d10-{thread}-s1")
    assert "still there?" in str(second["body"]["messages"])
    finishes = [i for i, (t, _) in enumerate(seq) if t == "finish"]
    assert [seq[i] for i in finishes] == [("finish", "stop"), ("finish", "stop")]
    texts = "".join(p for t, p in seq if t == "text-delta")
    assert texts == "yes, still herenext done", texts  # "next" ran after the first run, as its own turn
    run_ids = list(dict.fromkeys(c["runId"] for c in chunks if c["type"] == "finish"))
    assert len(run_ids) == 2
    assert failed < next(t for t, c in timed if c["type"] == "finish")
    assert content([c for _, c in timed2])[-1] == ("finish", "abort")
    assert timed2[-1][0] - aborted_at <= 2.0, timed2[-1][0] - aborted_at


async def test_d10_a_child_run_past_the_sub_agent_deadline_is_aborted_and_the_parent_goes_on(services, settings,
                                                                                             model, cluster):
    tag = uuid.uuid4().hex[:6]
    thread, call = f"th-d10e-{tag}", f"c-e-{tag}"
    child_thread = f"{thread}.agent-slow.{call}"
    await model.aqueue([ms.tool_calls(ms.tool_call("agent-slow", {"prompt": "work"}, id=call))],
                       model=f"threadline-d10l-{thread}-s0")
    await model.aqueue([ms.text("the helper gave up")], model=f"threadline-d10l-{thread}-s1")
    await model.aqueue([ms.tool_calls(ms.tool_call("hang_forever", {}, id=f"h-{call}"))],
                       model=f"threadline-d10s-{child_thread}-s0")
    with swapped_service(services, "run_orchestrator", f"d10e{tag}", THREADLINE_SUB_AGENT_TIMEOUT_S="20",
                         THREADLINE_SWEEP_INTERVAL_S="0.5"):
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            run_id = (await (await tl.stream("delegate", agent_id="d10-lead", resource_id="res-1",
                                             thread_id=thread)).accepted).run_id
            timed = await collect_timed(sub, timeout_s=60)
            await sub.unsubscribe()
        [child] = await rows(cluster.dsn, "SELECT * FROM runs WHERE parent_run_id = $1", run_id)
        child = await run_row(cluster.dsn, child["run_id"], settle_s=10)
        assert child["status"] == "aborted", dict(child)
        assert await wait_idle(cluster.dsn, child_thread, timeout_s=10)  # the child's lease released
    called, _ = _at(timed, "tool-call")
    failed, chunk = _at(timed, "tool-error")
    assert chunk["payload"]["error"] == {"name": "ToolTimeoutError", "message": "tool agent-slow timed out after 20 s"}
    assert abs(failed - called - 20) <= 2.0, failed - called
    seq = content([c for _, c in timed if c["runId"] == run_id])
    assert seq[-1] == ("finish", "stop") and "".join(p for t, p in seq if t == "text-delta") == "the helper gave up"
    assert (await run_row(cluster.dsn, run_id))["status"] == "finished"
    assert await wait_idle(cluster.dsn, thread, timeout_s=10)

"""Sub-agents as durable child runs (decisions 76-79).

``sub-lead`` calls the tool ``agent-helper``; its step is suspended, the orchestrator starts the
helper's child run on its own thread, the helper calls a counted side effect and answers, its
answer becomes the lead's tool result and the lead's next step answers. With ``kill -9`` of the
worker in the middle of the child's step (after its side effect was stored) and of the
orchestrator right after it applied the child's end (the parent's resumed step task committed,
not yet published), the child run exists once, its side effect and its result are stored once,
the parent finishes once, and the checker's stream and run rules hold for both runs.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tests.e2e.checker import TERMINAL_LIFECYCLE, Figures, check_runs, clean
from tests.e2e.faults import read_all
from tests.e2e.helpers import collect_run, execute, rows, run_row, swapped_service, wait_idle
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms
from threadline.testing.harness import wait_file
from threadline.topics import Topics

RES = "res-sub"


def _script(model: Any, thread: str, call: str) -> str:
    """Queue the four model turns; returns the child's thread id."""
    child_thread = f"{thread}.agent-helper.{call}"
    model.queue([ms.tool_calls(ms.tool_call("agent-helper", {"prompt": "count one"}, id=call), times=3)],
                model=f"threadline-subl-{thread}-s0")
    model.queue([ms.text("The helper reports: counted one.", times=3)], model=f"threadline-subl-{thread}-s1")
    model.queue([ms.tool_calls(ms.tool_call("chaos_effect", {"n": 1}, id=f"eff-{call}"), times=3)],
                model=f"threadline-subh-{child_thread}-s0")
    model.queue([ms.text("counted one", times=3)], model=f"threadline-subh-{child_thread}-s1")
    return child_thread


async def _run_lead(services: Any, settings: Any, model: Any, cluster: Any, *, tag: str | None = None,
                    during: Any = None, killed: set[int] | None = None) -> dict[str, Any]:
    """One ``sub-lead`` run calling ``agent-helper``; ``during(thread, call)`` runs (in a thread)
    while the run goes on. Returns what the assertions read."""
    await execute(cluster.dsn, "CREATE TABLE IF NOT EXISTS chaos_effects (run_id text, tool_call_id text, "
                               "idempotency_key text, pid integer, at timestamptz DEFAULT now())")
    tag = tag or uuid.uuid4().hex[:6]
    thread, call = f"th-sub-{tag}", f"callsub{tag}"
    child_thread = _script(model, thread, call)
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread(RES, thread)
        child_sub = await tl.subscribe_to_thread(RES, child_thread)
        sent = await tl.stream("ask the helper", agent_id="sub-lead", resource_id=RES, thread_id=thread)
        accepted = await sent.accepted
        run_id = accepted.run_id
        if during is not None:
            await asyncio.to_thread(during, thread, call)
        chunks = await collect_run(sub, timeout_s=120)
        child_chunks = await collect_run(child_sub, timeout_s=60)
        output = await accepted.output.consume_stream(timeout_s=60)  # the run's own view (RunOutput)
        await sub.unsubscribe()
        await child_sub.unsubscribe()
    parent = await run_row(cluster.dsn, run_id)
    calls = await rows(cluster.dsn, "SELECT * FROM sub_agent_calls WHERE parent_run_id = $1", run_id)
    child_runs = await rows(cluster.dsn, "SELECT * FROM runs WHERE parent_run_id = $1", run_id)
    assert len(calls) == 1 and len(child_runs) == 1, (calls, child_runs)  # the child exists once
    child_id = child_runs[0]["run_id"]
    child = await run_row(cluster.dsn, child_id)
    run_ids = [run_id, child_id]
    topics = Topics.of(settings)  # in the shared chunk layout both threads' partitions of the shared topic
    names = list(dict.fromkeys([topics.chunks(RES, thread), topics.chunks(RES, child_thread)]))
    replay = await read_all(settings.kafka_bootstrap, names,
                            partitions=settings.chunk_partitions if topics.shared_layout else 1)
    if topics.shared_layout:  # the shared topic holds other threads' runs too
        replay = [c for c in replay if c.get("runId") in run_ids]
    for _ in range(60):  # the run's finish is streamed before the orchestrator announces its end
        lifecycle = await read_all(settings.kafka_bootstrap, [topics.lifecycle], partitions=settings.partitions)
        ended = {ev.get("run_id") for ev in lifecycle if ev.get("type") in TERMINAL_LIFECYCLE}
        if set(run_ids) <= ended:
            break
        await asyncio.sleep(0.5)
    runs = {r["run_id"]: r for r in await rows(cluster.dsn, "SELECT * FROM runs WHERE run_id = ANY($1::text[])",
                                               run_ids)}
    stored: dict[str, list[Any]] = {}
    for m in await rows(cluster.dsn, "SELECT run_id, role FROM messages WHERE run_id = ANY($1::text[]) "
                                     "ORDER BY position", run_ids):
        stored.setdefault(m["run_id"], []).append(m)
    effects = await rows(cluster.dsn, "SELECT run_id, tool_call_id, pid FROM chaos_effects "
                                      "WHERE run_id = ANY($1::text[])", run_ids)
    # a sub-agent call is executed by its child run: one row per child run (the checker's "once")
    children = await rows(cluster.dsn, "SELECT parent_run_id AS run_id, parent_tool_call_id AS tool_call_id, "
                                       "NULL::int AS pid FROM runs WHERE parent_run_id = $1", run_id)
    fig = check_runs(observed=[chunks + child_chunks, replay], run_ids=run_ids, runs=runs, messages=stored,
                     lifecycle=lifecycle, effects=[*effects, *children], killed_pids=killed or set())
    results = await rows(cluster.dsn, "SELECT * FROM tool_calls WHERE run_id = $1", run_id)
    return {"run_id": run_id, "child_id": child_id, "parent": parent, "child": child, "calls": calls,
            "chunks": chunks, "child_chunks": child_chunks, "fig": fig, "effects": effects, "results": results,
            "call": call, "thread": thread, "child_thread": child_thread, "output": output}


def _assert_pair(out: dict[str, Any], model: Any) -> None:
    """The behaviour every variant shares."""
    assert out["fig"].ok, out["fig"].problems
    assert out["parent"]["status"] == "finished" and out["child"]["status"] == "finished"
    assert out["child"]["parent_run_id"] == out["run_id"] and out["child"]["parent_tool_call_id"] == out["call"]
    assert out["child"]["thread_id"] == out["child_thread"]
    assert [c["status"] for c in out["calls"]] == ["done"]
    assert len(out["results"]) == 1  # the child's result, once
    assert out["results"][0]["result"]["text"] == "counted one" and out["results"][0]["error"] is None
    assert [(e["run_id"], e["tool_call_id"]) for e in out["effects"]] == [(out["child_id"], f"eff-{out['call']}")]
    kept = clean(out["chunks"], Figures())[out["run_id"]]  # a dead attempt's chunks dropped
    kinds = [(c["type"], c["runId"]) for c in kept if c["type"] in ("tool-call", "tool-result", "finish")]
    assert kinds == [("tool-call", out["run_id"]), ("tool-result", out["run_id"]), ("finish", out["run_id"])]
    result = next(c for c in out["chunks"] if c["type"] == "tool-result")
    assert result["payload"]["toolName"] == "agent-helper"
    assert result["payload"]["result"]["text"] == "counted one"
    assert result["payload"]["result"]["subAgentRunId"] == out["child_id"]
    assert [c["type"] for c in out["child_chunks"]].count("finish") == 1
    assert out["parent"]["text"] == "The helper reports: counted one."
    # nested chunks: the parent's subscribers got the child's whole stream as tool-output chunks,
    # the same chunks (runId, seq, content) as the child thread's subscribers
    nested = [c for c in out["chunks"] if c["type"] == "tool-output"]
    assert nested and {(c["payload"]["toolCallId"], c["payload"]["toolName"], c["payload"]["parentRunId"])
                       for c in nested} == {(out["call"], "agent-helper", out["run_id"])}
    via_parent = clean([c["payload"]["output"] for c in nested], Figures())[out["child_id"]]
    own = clean(out["child_chunks"], Figures())[out["child_id"]]
    assert via_parent == own and via_parent[-1]["type"] == "finish"
    assert any(c["type"] == "text-delta" for c in via_parent)
    # the parent's RunOutput (stream()'s result) carries them too, its own finish last
    in_output = [c["payload"]["output"] for c in out["output"] if c["type"] == "tool-output"]
    assert [c["seq"] for c in in_output] == [c["seq"] for c in own]
    assert out["output"][-1]["type"] == "finish" and out["output"][-1]["runId"] == out["run_id"]
    # the lead's resumed step sent the child's answer to the model as the tool result
    asked = model.requests(model=f"threadline-subl-{out['thread']}-s1")
    assert asked and "counted one" in str(asked[-1])
    # the child was asked with the call's prompt
    assert "count one" in str(model.requests(model=f"threadline-subh-{out['child_thread']}-s0")[0])


async def test_a_sub_agent_call_is_a_child_run_and_resumes_its_parent(services, settings, model, cluster):
    out = await _run_lead(services, settings, model, cluster)
    _assert_pair(out, model)
    # the parent step did not hold a worker: it ended suspended, and the step after it was scheduled
    step_finish = [c for c in out["chunks"] if c["type"] == "step-finish"]
    assert step_finish[0]["payload"]["stepResult"]["isContinued"] is True and out["parent"]["step"] == 1
    assert len(model.requests(model=f"threadline-subl-{out['thread']}-s0")) == 1


async def test_worker_killed_mid_child_step(services, settings, model, cluster, tmp_path):
    pause_file = tmp_path / "paused"
    killed: set[int] = set()

    def kill_mid_child(thread: str, call: str) -> None:
        wait_file(pause_file, "after_tool_result_stored", 60)  # the child's side effect is stored
        services.start("processor_worker", "processor_worker-1")
        killed.add(services.pid("processor_worker-armed"))
        services.kill("processor_worker-armed")

    # the armed worker takes every partition
    with swapped_service(services, "processor_worker", "armed", kill=True,
                         THREADLINE_PAUSE_POINTS="after_tool_result_stored", THREADLINE_PAUSE_FILE=str(pause_file),
                         THREADLINE_PAUSE_MATCH=".agent-helper."):
        out = await _run_lead(services, settings, model, cluster, during=kill_mid_child, killed=killed)
    assert killed
    _assert_pair(out, model)
    # the child's step was re-executed by another worker: its attempt was declared dead
    assert any(c["type"] == "attempt-discarded" for c in out["child_chunks"])


async def test_worker_killed_before_the_suspended_parent_step_is_stored(services, settings, model, cluster, tmp_path):
    pause_file = tmp_path / "paused"
    killed: set[int] = set()
    tag = uuid.uuid4().hex[:6]

    def kill_mid_parent(thread: str, call: str) -> None:
        wait_file(pause_file, "before_step_result_write", 60)  # the parent's step 0 ran, not stored
        services.start("processor_worker", "processor_worker-1")
        killed.add(services.pid("processor_worker-armed"))
        services.kill("processor_worker-armed")

    with swapped_service(services, "processor_worker", "armed", kill=True,
                         THREADLINE_PAUSE_POINTS="before_step_result_write", THREADLINE_PAUSE_FILE=str(pause_file),
                         THREADLINE_PAUSE_MATCH=f"th-sub-{tag}"):
        out = await _run_lead(services, settings, model, cluster, tag=tag, during=kill_mid_parent, killed=killed)
    _assert_pair(out, model)  # one child run, one result
    # the re-executed step replayed the recorded model output: same tool call id, the model asked once
    assert len(model.requests(model=f"threadline-subl-{out['thread']}-s0")) == 1
    assert any(c["type"] == "attempt-discarded" and c["runId"] == out["run_id"] for c in out["chunks"])


@pytest.mark.parametrize("held", [
    # right after it applied the parent's suspended result: the child run committed, its step 0 task not sent
    pytest.param(lambda tag: f"th-sub-{tag} suspended", id="after-it-created-the-child"),
    # right after it applied the child's end: the parent's next step task committed, not sent
    pytest.param(lambda tag: f"th-sub-{tag}.agent-helper.callsub{tag} finished", id="between-child-end-and-parent-resume"),
])
async def test_orchestrator_killed_mid_child(services, settings, model, cluster, tmp_path, held):
    pause_file = tmp_path / "paused"
    tag = uuid.uuid4().hex[:6]

    def kill_when_held(thread: str, call: str) -> None:
        wait_file(pause_file, "after_step_result_applied", 60)
        services.start("run_orchestrator", "run_orchestrator-1")
        services.kill("run_orchestrator-armed")

    # the pause point's key is "<thread> <outcome>": held only at the application named by `held`
    with swapped_service(services, "run_orchestrator", "armed", kill=True,
                         THREADLINE_PAUSE_POINTS="after_step_result_applied", THREADLINE_PAUSE_FILE=str(pause_file),
                         THREADLINE_PAUSE_MATCH=held(tag)):
        out = await _run_lead(services, settings, model, cluster, tag=tag, during=kill_when_held)
    _assert_pair(out, model)


async def _waiting(dsn: str, run_id: str) -> None:
    """Until the parent's step is suspended (its children started)."""
    for _ in range(240):
        row = await rows(dsn, "SELECT waiting_children FROM runs WHERE run_id = $1", run_id)
        if row and row[0]["waiting_children"]:
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"run {run_id} never waited for its children")


async def test_a_message_to_the_waiting_parent_is_delivered_into_it(services, settings, model, cluster):
    tag = uuid.uuid4().hex[:6]
    thread, call = f"th-sub-{tag}", f"callsub{tag}"
    child_thread = f"{thread}.agent-helper.{call}"
    model.queue([ms.tool_calls(ms.tool_call("agent-helper", {"prompt": "think"}, id=call))],
                model=f"threadline-subl-{thread}-s0")
    model.queue([ms.text("Both noted.")], model=f"threadline-subl-{thread}-s1")
    model.queue([ms.text("thought it over", delay=4)], model=f"threadline-subh-{child_thread}-s0")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread(RES, thread)
        sent = await tl.stream("ask the helper", agent_id="sub-lead", resource_id=RES, thread_id=thread)
        run_id = (await sent.accepted).run_id
        await _waiting(cluster.dsn, run_id)
        extra = await tl.send_message("one more thing meanwhile", agent_id="sub-lead", resource_id=RES,
                                      thread_id=thread)
        accepted = await extra.accepted
        chunks = await collect_run(sub, timeout_s=90)
        await sub.unsubscribe()
    assert accepted.action == "deliver" and accepted.run_id == run_id  # not a second run on the thread
    assert (await run_row(cluster.dsn, run_id))["status"] == "finished"
    assert len(await rows(cluster.dsn, "SELECT 1 FROM runs WHERE thread_id = $1", thread)) == 1
    prompt = str(model.requests(model=f"threadline-subl-{thread}-s1")[-1])
    assert "thought it over" in prompt and "one more thing meanwhile" in prompt
    result = next(c for c in chunks if c["type"] == "tool-result")
    assert result["payload"]["result"]["text"] == "thought it over"


async def test_a_failed_child_is_a_tool_error_of_its_parent(services, settings, model, cluster):
    tag = uuid.uuid4().hex[:6]
    thread, call = f"th-sub-{tag}", f"callsub{tag}"
    child_thread = f"{thread}.agent-helper.{call}"
    model.queue([ms.tool_calls(ms.tool_call("agent-helper", {"prompt": "fail"}, id=call))],
                model=f"threadline-subl-{thread}-s0")
    model.queue([ms.text("The helper could not do it.")], model=f"threadline-subl-{thread}-s1")
    model.queue([ms.error(400, "no such thing")], model=f"threadline-subh-{child_thread}-s0")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread(RES, thread)
        sent = await tl.stream("ask the helper", agent_id="sub-lead", resource_id=RES, thread_id=thread)
        run_id = (await sent.accepted).run_id
        chunks = await collect_run(sub, timeout_s=90)
        await sub.unsubscribe()
    child = (await rows(cluster.dsn, "SELECT * FROM runs WHERE parent_run_id = $1", run_id))[0]
    assert child["status"] == "failed"
    errors = [c for c in chunks if c["type"] == "tool-error" and c["runId"] == run_id]
    assert len(errors) == 1 and errors[0]["payload"]["toolCallId"] == call
    assert "sub-agent run failed" in str(errors[0]["payload"]["error"])
    assert (await run_row(cluster.dsn, run_id))["status"] == "finished"
    assert "sub-agent run failed" in str(model.requests(model=f"threadline-subl-{thread}-s1")[-1])


async def test_aborting_the_waiting_parent_aborts_its_child(services, settings, model, cluster):
    tag = uuid.uuid4().hex[:6]
    thread, call = f"th-sub-{tag}", f"callsub{tag}"
    child_thread = f"{thread}.agent-helper.{call}"
    model.queue([ms.tool_calls(ms.tool_call("agent-helper", {"prompt": "take long"}, id=call))],
                model=f"threadline-subl-{thread}-s0")
    model.queue([ms.text("never sent", delay=60)], model=f"threadline-subh-{child_thread}-s0")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread(RES, thread)
        sent = await tl.stream("ask the helper", agent_id="sub-lead", resource_id=RES, thread_id=thread)
        run_id = (await sent.accepted).run_id
        await _waiting(cluster.dsn, run_id)
        assert await tl.abort(resource_id=RES, thread_id=thread, agent_id="sub-lead")
        chunks = await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
    assert [c["type"] for c in chunks if c["runId"] == run_id][-2:] == ["abort", "finish"]
    child_id = (await rows(cluster.dsn, "SELECT run_id FROM runs WHERE parent_run_id = $1", run_id))[0]["run_id"]
    for _ in range(120):  # the child's abort goes through the outbox after the parent's
        child = await run_row(cluster.dsn, child_id)
        if child["status"] != "running":
            break
        await asyncio.sleep(0.25)
    assert child["status"] == "aborted"
    assert (await run_row(cluster.dsn, run_id))["status"] == "aborted"
    stored = await rows(cluster.dsn, "SELECT error FROM tool_calls WHERE run_id = $1", run_id)
    assert [r["error"] for r in stored] == ["sub-agent run aborted"]
    assert await wait_idle(cluster.dsn, thread) and await wait_idle(cluster.dsn, child_thread)
    assert not model.requests(model=f"threadline-subl-{thread}-s1")  # the parent never resumed


async def test_two_sub_agent_calls_in_one_step_resume_the_parent_once_both_ended(services, settings, model, cluster):
    tag = uuid.uuid4().hex[:6]
    thread, calls = f"th-sub-{tag}", [f"callsuba{tag}", f"callsubb{tag}"]
    model.queue([ms.tool_calls(*(ms.tool_call("agent-helper", {"prompt": f"part {i}"}, id=c)
                                 for i, c in enumerate(calls)))], model=f"threadline-subl-{thread}-s0")
    model.queue([ms.text("Both parts are in.")], model=f"threadline-subl-{thread}-s1")
    # the first child is slow: the parent must wait for both, whatever order they end in
    model.queue([ms.text("part zero done", delay=3)], model=f"threadline-subh-{thread}.agent-helper.{calls[0]}-s0")
    model.queue([ms.text("part one done")], model=f"threadline-subh-{thread}.agent-helper.{calls[1]}-s0")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread(RES, thread)
        sent = await tl.stream("split it", agent_id="sub-lead", resource_id=RES, thread_id=thread)
        run_id = (await sent.accepted).run_id
        chunks = await collect_run(sub, timeout_s=90)
        await sub.unsubscribe()
    children = await rows(cluster.dsn, "SELECT * FROM runs WHERE parent_run_id = $1 ORDER BY parent_tool_call_id",
                          run_id)
    assert [(c["parent_tool_call_id"], c["status"]) for c in children] == [(calls[0], "finished"),
                                                                         (calls[1], "finished")]
    kept = clean(chunks, Figures())[run_id]
    results = {c["payload"]["toolCallId"]: c["payload"]["result"]["text"] for c in kept if c["type"] == "tool-result"}
    assert results == {calls[0]: "part zero done", calls[1]: "part one done"}
    assert (await run_row(cluster.dsn, run_id))["status"] == "finished"
    asked = model.requests(model=f"threadline-subl-{thread}-s1")
    assert len(asked) == 1 and "part zero done" in str(asked[0]) and "part one done" in str(asked[0])


async def test_the_sweeper_redelivers_a_lost_suspended_result_and_leaves_the_waiting_parent_alone(
        services, settings, model, cluster):
    from tests.e2e.test_recovery import swapped  # the sweeper at 3 s, as its own tests run it

    tag = uuid.uuid4().hex[:6]
    thread, call = f"th-sub-{tag}", f"callsub{tag}"
    child_thread = f"{thread}.agent-helper.{call}"
    model.queue([ms.tool_calls(ms.tool_call("agent-helper", {"prompt": "slowly"}, id=call))],
                model=f"threadline-subl-{thread}-s0")
    model.queue([ms.text("Done at last.")], model=f"threadline-subl-{thread}-s1")
    # the child takes longer than the sweeper's stuck_after_s (3 s): the waiting parent is not stuck
    model.queue([ms.text("slow answer", delay=8)], model=f"threadline-subh-{child_thread}-s0")
    # the first result of the thread (the suspended step 0) is lost on its way
    with swapped(services, "sub", orchestrator_env={"THREADLINE_FAIL_POINTS": "drop_step_result",
                                                    "THREADLINE_FAIL_MATCH": thread}):
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread(RES, thread)
            sent = await tl.stream("ask the helper", agent_id="sub-lead", resource_id=RES, thread_id=thread)
            run_id = (await sent.accepted).run_id
            chunks = await collect_run(sub, timeout_s=120)
            await sub.unsubscribe()
        assert await wait_idle(cluster.dsn, thread)
    assert (await run_row(cluster.dsn, run_id))["status"] == "finished"
    children = await rows(cluster.dsn, "SELECT run_id, status FROM runs WHERE parent_run_id = $1", run_id)
    assert [c["status"] for c in children] == ["finished"]
    recovered = await rows(cluster.dsn, "SELECT run_id, step, action FROM run_recoveries WHERE run_id = ANY($1::text[])",
                           [run_id, children[0]["run_id"]])
    assert [(r["run_id"], r["step"], r["action"]) for r in recovered] == [(run_id, 0, "redeliver_result")]
    kept = clean(chunks, Figures())[run_id]
    assert [c["payload"]["result"]["text"] for c in kept if c["type"] == "tool-result"] == ["slow answer"]

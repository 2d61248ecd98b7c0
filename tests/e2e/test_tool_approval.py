"""Tool approval (decisions 225-227): a call of a tool that needs approval stops the run before the
tool runs, with Mastra's ``tool-call-approval`` chunk; the run's step ends ``suspended`` and the
run waits holding no worker (its lease kept, no heartbeat, no step claimed); approve runs the tool
once (approving twice too) and the run goes on; decline gives the model the decline's reason as
the call's result; a ``kill -9`` of the worker and the orchestrator while the run waits changes
none of it; an abort ends a waiting run."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import collect_run, execute, rows, run_row, wait_idle
from threadline.client import ThreadlineClient
from threadline.client.results import RequestFailed
from threadline.events.approval_chunks import APPROVAL_RESUME_SCHEMA, DEFAULT_DECLINE_REASON
from threadline.testing import model_script as ms

RES = "res-appr"
ROOT = Path(__file__).resolve().parents[2]


async def _until(sub: Any, kind: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """The thread's chunks up to the first of type ``kind`` (included)."""
    out: list[dict[str, Any]] = []

    async def pump() -> None:
        async for chunk in sub.stream:
            out.append(chunk)
            if chunk["type"] == kind:
                return

    await asyncio.wait_for(pump(), timeout_s)
    return out


def _script(model: Any, thread: str, call: str, *, tool: str = "approved_effect") -> None:
    model.queue([ms.tool_calls(ms.tool_call(tool, {"n": 1}, id=call), times=3)], model=f"threadline-appr-{thread}-s0")
    model.queue([ms.text("All done.", times=3)], model=f"threadline-appr-{thread}-s1")


@dataclass
class Held:
    """A run of the thread waiting for approval: its subscription (read up to the approval
    chunk, ``before``), its run id and the held call's id."""

    sub: Any
    thread: str
    run_id: str
    call: str
    before: list[dict[str, Any]]


async def _held(tl: ThreadlineClient, model: Any, tag: str, *, agent: str = "approver", tool: str = "approved_effect",
                resource: str = RES, options: dict[str, Any] | None = None) -> Held:
    """Script a run that calls ``tool`` once, start it on a new thread and read its stream up to
    its ``tool-call-approval``."""
    thread, call = f"th-{tag}-{uuid.uuid4().hex[:6]}", f"call{uuid.uuid4().hex[:6]}"
    _script(model, thread, call, tool=tool)
    sub = await tl.subscribe_to_thread(resource, thread)
    sent = await tl.stream("count one", agent_id=agent, resource_id=resource, thread_id=thread, options=options)
    run_id = (await sent.accepted).run_id
    return Held(sub, thread, run_id, call, await _until(sub, "tool-call-approval"))


def _cli(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "THREADLINE_KAFKA_BOOTSTRAP": cluster.bootstrap,
           "THREADLINE_PG_DSN": cluster.dsn, "THREADLINE_TOPIC_PREFIX": cluster.prefix}
    return subprocess.run([sys.executable, "-m", "threadline.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


async def _effects(dsn: str, run_id: str) -> int:
    return len(await rows(dsn, "SELECT 1 FROM chaos_effects WHERE run_id = $1", run_id))


async def _waits_on_no_worker(dsn: str, run_id: str, thread: str) -> None:
    """The run waits: marked so, its lease kept without expiry, no step claimed, no effect."""
    for _ in range(100):  # the orchestrator applies the suspended result just after the worker
        run = (await rows(dsn, "SELECT * FROM runs WHERE run_id = $1", run_id))[0]
        if run["waiting_children"]:
            break
        await asyncio.sleep(0.1)
    assert run["status"] == "running" and run["waiting_children"], dict(run)
    lease = (await rows(dsn, "SELECT run_id, expires_at::text AS exp FROM thread_leases WHERE thread_id = $1",
                        thread))[0]
    assert lease["run_id"] == run_id and lease["exp"] == "infinity"
    beat = run["step_heartbeat"]
    await asyncio.sleep(2)  # no worker executes a step of it: its heartbeat stands still
    again = (await rows(dsn, "SELECT step, step_heartbeat, waiting_children FROM runs WHERE run_id = $1", run_id))[0]
    assert (again["step"], again["step_heartbeat"], again["waiting_children"]) == (run["step"], beat, True)
    assert await _effects(dsn, run_id) == 0  # the tool has not run


@pytest.fixture
async def effects_table(cluster: Any) -> None:
    await execute(cluster.dsn, "CREATE TABLE IF NOT EXISTS chaos_effects (run_id text, tool_call_id text, "
                               "idempotency_key text, pid integer, at timestamptz DEFAULT now())")


async def test_approve_runs_the_tool_once_and_the_run_goes_on(services, settings, model, cluster, effects_table):
    async with ThreadlineClient(settings) as tl:
        h = await _held(tl, model, "appr")
        sub, thread, run_id, call = h.sub, h.thread, h.run_id, h.call
        before = h.before
        approval = before[-1]
        assert approval["payload"] == {"toolCallId": call, "toolName": "approved_effect", "args": {"n": 1},
                                       "resumeSchema": APPROVAL_RESUME_SCHEMA}
        assert approval["runId"] == run_id and approval["from"] == "AGENT"
        await _waits_on_no_worker(cluster.dsn, run_id, thread)
        first = await tl.approve_tool_call(resource_id=RES, thread_id=thread, run_id=run_id, tool_call_id=call)
        second = await tl.approve_tool_call(resource_id=RES, thread_id=thread, run_id=run_id, tool_call_id=call)
        after = await collect_run(sub, timeout_s=90)
        await sub.unsubscribe()
    assert (first.resolved, first.status) == (True, "approved")
    assert (second.resolved, second.status) == (False, "approved")  # idempotent: the first answer stands
    kinds = [c["type"] for c in after]
    assert kinds.index("tool-result") < kinds.index("finish") and kinds.count("finish") == 1
    result = next(c for c in after if c["type"] == "tool-result")
    assert result["payload"]["result"] == {"done": 1} and result["payload"]["toolCallId"] == call
    assert await _effects(cluster.dsn, run_id) == 1
    row = await run_row(cluster.dsn, run_id)
    assert row["status"] == "finished" and row["text"] == "All done."
    asked = model.requests(model=f"threadline-appr-{thread}-s1")[0]["body"]["messages"]
    assert asked[-1] == {"role": "tool", "tool_call_id": call, "content": '{"done":1}'}
    stored = await rows(cluster.dsn, "SELECT content FROM messages WHERE thread_id = $1 AND role = 'assistant' "
                                     "ORDER BY created_at", thread)
    invocation = next(p["toolInvocation"] for m in stored for p in m["content"]["parts"]
                      if p.get("type") == "tool-invocation")
    assert invocation["state"] == "result" and invocation["approval"] == {"id": call, "approved": True}
    assert await wait_idle(cluster.dsn, thread)


async def test_decline_tells_the_model_and_never_runs_the_tool(services, settings, model, cluster, effects_table):
    async with ThreadlineClient(settings) as tl:
        h = await _held(tl, model, "decl")
        sub, thread, run_id, call = h.sub, h.thread, h.run_id, h.call
        with pytest.raises(RequestFailed):  # tenancy: another resource's thread is refused
            await tl.decline_tool_call(resource_id="res-other", thread_id=thread, run_id=run_id, tool_call_id=call)
        unknown = await tl.decline_tool_call(resource_id=RES, thread_id=thread, run_id=run_id, tool_call_id="nope")
        declined = await tl.decline_tool_call(resource_id=RES, thread_id=thread, run_id=run_id, tool_call_id=call,
                                              reason="Not today")
        late = await tl.approve_tool_call(resource_id=RES, thread_id=thread, run_id=run_id, tool_call_id=call)
        after = await collect_run(sub, timeout_s=90)
        await sub.unsubscribe()
    assert (unknown.resolved, unknown.status) == (False, "unknown")
    assert (declined.resolved, declined.status) == (True, "declined")
    assert (late.resolved, late.status) == (False, "declined")  # an approval after the decline changes nothing
    denied = [c for c in after if c["type"] == "tool-output-denied"]
    assert len(denied) == 1 and denied[0]["payload"] == {
        "toolCallId": call, "toolName": "approved_effect", "args": {"n": 1},
        "approval": {"id": call, "approved": False, "reason": "Not today"}}
    assert not any(c["type"] in ("tool-result", "tool-error") for c in after)
    assert await _effects(cluster.dsn, run_id) == 0
    asked = model.requests(model=f"threadline-appr-{thread}-s1")[0]["body"]["messages"]
    assert asked[-1] == {"role": "tool", "tool_call_id": call, "content": "Not today"}
    row = await run_row(cluster.dsn, run_id)
    assert row["status"] == "finished"
    assert await wait_idle(cluster.dsn, thread)


async def test_the_call_option_holds_any_tool_and_a_default_decline_reason(services, settings, model, cluster,
                                                                          effects_table):
    async with ThreadlineClient(settings) as tl:
        h = await _held(tl, model, "opt", agent="approver-opt", tool="plain_effect", options={"requireToolApproval": True})
        sub, thread, run_id, call = h.sub, h.thread, h.run_id, h.call
        approval = h.before[-1]
        assert approval["payload"]["toolName"] == "plain_effect"
        done = await asyncio.to_thread(_cli, cluster, "decline-tool-call", "-r", RES, "-t", thread, "--run-id", run_id,
                                       "--tool-call-id", call)  # the CLI's answer, the default reason
        after = await collect_run(sub, timeout_s=90)
        await sub.unsubscribe()
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "type": "resolved", "resolved": True, "status": "declined", "run_id": run_id, "tool_call_id": call}
    denied = next(c for c in after if c["type"] == "tool-output-denied")
    assert denied["payload"]["approval"]["reason"] == DEFAULT_DECLINE_REASON
    asked = model.requests(model=f"threadline-appr-{thread}-s1")[0]["body"]["messages"]
    assert asked[-1]["content"] == DEFAULT_DECLINE_REASON
    assert await _effects(cluster.dsn, run_id) == 0


async def test_a_waiting_run_survives_kill_9_of_worker_and_orchestrator(services, settings, model, cluster,
                                                                        effects_table):
    async with ThreadlineClient(settings) as tl:
        h = await _held(tl, model, "kill")
        sub, thread, run_id, call = h.sub, h.thread, h.run_id, h.call
        await _waits_on_no_worker(cluster.dsn, run_id, thread)
        services.kill("processor_worker-1")  # kill -9 of every service that touched the run
        services.kill("run_orchestrator-1")
        await asyncio.to_thread(services.start, "run_orchestrator", "run_orchestrator-1")
        await asyncio.to_thread(services.start, "processor_worker", "processor_worker-1")
        await _waits_on_no_worker(cluster.dsn, run_id, thread)  # the sweeper left it waiting
        answer = await tl.approve_tool_call(resource_id=RES, thread_id=thread, run_id=run_id, tool_call_id=call)
        assert answer.resolved
        after = await collect_run(sub, timeout_s=120)
        await sub.unsubscribe()
    assert [c["type"] for c in after].count("finish") == 1
    assert await _effects(cluster.dsn, run_id) == 1  # the tool ran exactly once
    row = await run_row(cluster.dsn, run_id)
    assert row["status"] == "finished"
    ended = await rows(cluster.dsn, "SELECT count(*) AS n FROM runs WHERE thread_id = $1", thread)
    assert ended[0]["n"] == 1
    assert await wait_idle(cluster.dsn, thread)


async def test_approve_and_decline_over_the_gateway_and_tenancy(gateway, settings, model, cluster, effects_table):
    from tests.e2e.gateway_http import TENANT_A

    async with ThreadlineClient.connect_http(gateway.url, api_key=gateway.key_a) as tl, \
            ThreadlineClient.connect_http(gateway.url, api_key=gateway.key_b) as other:
        h = await _held(tl, model, "gw", resource=TENANT_A)
        sub, thread, run_id, call = h.sub, h.thread, h.run_id, h.call
        with pytest.raises(Exception, match="403 forbidden"):  # tenant B may not act for tenant A
            await other.approve_tool_call(resource_id=TENANT_A, thread_id=thread, run_id=run_id, tool_call_id=call)
        first = await tl.approve_tool_call(resource_id=TENANT_A, thread_id=thread, run_id=run_id, tool_call_id=call)
        again = await tl.decline_tool_call(resource_id=TENANT_A, thread_id=thread, run_id=run_id, tool_call_id=call)
        after = await collect_run(sub, timeout_s=90)
        await sub.unsubscribe()
    assert (first.resolved, first.status, again.resolved, again.status) == (True, "approved", False, "approved")
    assert any(c["type"] == "tool-result" for c in after)
    assert await _effects(cluster.dsn, run_id) == 1


async def test_an_abort_ends_a_waiting_run_and_a_late_answer_runs_nothing(services, settings, model, cluster,
                                                                          effects_table):
    async with ThreadlineClient(settings) as tl:
        h = await _held(tl, model, "abrt")
        sub, thread, run_id, call = h.sub, h.thread, h.run_id, h.call
        await _waits_on_no_worker(cluster.dsn, run_id, thread)
        assert await tl.abort(resource_id=RES, thread_id=thread, agent_id="approver")
        after = await collect_run(sub, timeout_s=60)
        late = await tl.approve_tool_call(resource_id=RES, thread_id=thread, run_id=run_id, tool_call_id=call)
        await sub.unsubscribe()
    assert after[-1]["type"] == "finish" and after[-1]["payload"]["stepResult"]["reason"] == "abort"
    assert (late.resolved, late.status) == (False, "pending")
    assert (await run_row(cluster.dsn, run_id))["status"] == "aborted"
    assert await wait_idle(cluster.dsn, thread)
    await asyncio.sleep(1)
    assert await _effects(cluster.dsn, run_id) == 0


WAITING = 30
"""Runs waiting at once in the count test (the issue's 1,000 is a benchmark's figure, not a suite
test's on a shared 2-core machine; nothing in the wait grows with the count)."""


async def test_many_waiting_runs_hold_no_worker_and_no_transaction(services, settings, model, cluster, effects_table):
    async with ThreadlineClient(settings) as tl:
        held = await asyncio.gather(*(_held(tl, model, f"many{i}") for i in range(WAITING)))
        ids = [h.run_id for h in held]
        for _ in range(100):  # every suspended result applied
            waiting = await rows(cluster.dsn, "SELECT count(*) AS n FROM runs WHERE run_id = ANY($1::text[]) "
                                              "AND waiting_children AND status = 'running'", ids)
            if waiting[0]["n"] == WAITING:
                break
            await asyncio.sleep(0.2)
        assert waiting[0]["n"] == WAITING
        beats = await rows(cluster.dsn, "SELECT run_id, step_heartbeat FROM runs WHERE run_id = ANY($1::text[])", ids)
        busy = await rows(cluster.dsn, "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                                       "AND state LIKE 'idle in transaction%' AND now() - xact_start > interval '1 second'")
        assert busy[0]["n"] == 0  # no transaction held open for a waiting run (a service's own last under 1 s)
        await asyncio.sleep(2)  # no worker executes any of them: every heartbeat stands still
        assert await rows(cluster.dsn, "SELECT run_id, step_heartbeat FROM runs WHERE run_id = ANY($1::text[])",
                          ids) == beats
        answers = await asyncio.gather(*(tl.approve_tool_call(resource_id=RES, thread_id=h.thread, run_id=h.run_id,
                                                              tool_call_id=h.call) for h in held))
        assert all(a.resolved for a in answers)
        await asyncio.gather(*(collect_run(h.sub, timeout_s=180) for h in held))
        for h in held:
            await h.sub.unsubscribe()
    done = await rows(cluster.dsn, "SELECT count(*) AS n FROM runs WHERE run_id = ANY($1::text[]) "
                                   "AND status = 'finished'", ids)
    effects = await rows(cluster.dsn, "SELECT count(*) AS n FROM chaos_effects WHERE run_id = ANY($1::text[])", ids)
    assert (done[0]["n"], effects[0]["n"]) == (WAITING, WAITING)


async def test_a_message_sent_while_the_run_waits_is_delivered_into_it(services, settings, model, cluster,
                                                                       effects_table):
    async with ThreadlineClient(settings) as tl:
        h = await _held(tl, model, "msg")
        await _waits_on_no_worker(cluster.dsn, h.run_id, h.thread)
        sent = await tl.send_message("also count two", agent_id="approver", resource_id=RES, thread_id=h.thread)
        accepted = await sent.accepted
        assert (accepted.action, accepted.run_id) == ("deliver", h.run_id)  # no second run: the thread is the run's
        await _waits_on_no_worker(cluster.dsn, h.run_id, h.thread)  # a delivery does not wake the waiting run
        await tl.approve_tool_call(resource_id=RES, thread_id=h.thread, run_id=h.run_id, tool_call_id=h.call)
        await collect_run(h.sub, timeout_s=90)
        await h.sub.unsubscribe()
    asked = model.requests(model=f"threadline-appr-{h.thread}-s1")[0]["body"]["messages"]
    said = [m for m in asked if m["role"] == "user"]
    assert "also count two" in str(said[-1]["content"])  # the step after the answer reads it
    assert asked.index(said[-1]) > next(i for i, m in enumerate(asked) if m["role"] == "tool")
    assert await _effects(cluster.dsn, h.run_id) == 1

"""The run-orchestrator's sweeper (``threadline.flows.sweeper``): a run made stuck on purpose — its
step task or its step result lost on the way (fail points ``drop_step_task`` /
``drop_step_result``) — is noticed once it showed no progress for ``STUCK_AFTER_S`` and driven
on; a run that cannot go on is failed with the reason."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

from tests.e2e.checker import Figures, check_stream, clean
from tests.e2e.helpers import collect_run, rows, run_row, wait_idle
from tests.e2e.records import read_lifecycle
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms

SWEEP = {"THREADLINE_STUCK_AFTER_S": "3", "THREADLINE_SWEEP_INTERVAL_S": "0.5"}


@contextlib.contextmanager
def swapped(services, tag: str, *, worker_env: dict[str, str] | None = None,
            orchestrator_env: dict[str, str] | None = None) -> Iterator[None]:
    """Replace the session's worker and orchestrator by instances with these settings."""
    services.stop("processor_worker-1")
    services.stop("run_orchestrator-1")
    services.start("processor_worker", f"processor_worker-{tag}", **(worker_env or {}))
    services.start("run_orchestrator", f"run_orchestrator-{tag}", **SWEEP, **(orchestrator_env or {}))
    try:
        yield
    finally:
        services.stop(f"processor_worker-{tag}")
        services.stop(f"run_orchestrator-{tag}")
        services.start("processor_worker", "processor_worker-1")
        services.start("run_orchestrator", "run_orchestrator-1")


async def _run(settings, agent: str, thread: str, *, timeout_s: float = 60) -> tuple[str, list[dict]]:
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        run_id = (await (await tl.stream("hello there", agent_id=agent, resource_id="res-1",
                                         thread_id=thread)).accepted).run_id
        chunks = await collect_run(sub, timeout_s=timeout_s)
        await sub.unsubscribe()
    return run_id, chunks


def _stream_ok(run_id: str, chunks: list[dict]) -> None:
    fig = Figures()
    kept = clean(chunks, fig)[run_id]
    check_stream(run_id, kept, fig)
    assert not fig.problems, fig.problems


async def _recoveries(dsn: str, run_id: str) -> list[tuple[str, str]]:
    return [(r["action"], r["reason"]) for r in
            await rows(dsn, "SELECT action, reason FROM run_recoveries WHERE run_id = $1 ORDER BY id", run_id)]


async def test_a_lost_step_task_is_rescheduled(services, settings, cluster):
    thread = f"th-sweep-task-{uuid.uuid4().hex[:6]}"
    with swapped(services, "sw1", worker_env={"THREADLINE_FAIL_POINTS": "drop_step_task",
                                              "THREADLINE_FAIL_MATCH": thread}):
        run_id, chunks = await _run(settings, "echo-agent", thread)
        assert await wait_idle(cluster.dsn, thread)
    assert (await run_row(cluster.dsn, run_id))["status"] == "finished"
    _stream_ok(run_id, chunks)
    recovered = await _recoveries(cluster.dsn, run_id)
    assert [a for a, _ in recovered] == ["reschedule"], recovered
    assert "step 0 in flight nowhere" in recovered[0][1]


async def test_a_lost_step_result_is_redelivered(services, settings, model, cluster):
    """The first result the orchestrator gets is lost: step 0's, a ``continue`` the worker left to
    the orchestrator to announce (the fail point ``save_unannounced``: the path a step takes when
    the worker's statement cannot announce it, decisions 103 and 106)."""
    thread = f"th-sweep-result-{uuid.uuid4().hex[:6]}"
    await model.aqueue([ms.tool_calls(ms.tool_call("chaos_effect", {"n": 1}))], model=f"threadline-chaos-{thread}-s0")
    await model.aqueue([ms.text("All done.")], model=f"threadline-chaos-{thread}-s1")
    with swapped(services, "sw2", worker_env={"THREADLINE_FAIL_POINTS": "save_unannounced",
                                              "THREADLINE_FAIL_MATCH": thread},
                 orchestrator_env={"THREADLINE_FAIL_POINTS": "drop_step_result", "THREADLINE_FAIL_MATCH": thread}):
        run_id, chunks = await _run(settings, "chaos", thread)
        assert await wait_idle(cluster.dsn, thread)
    row = await run_row(cluster.dsn, run_id)
    assert row["status"] == "finished" and row["steps_done"] == 2
    _stream_ok(run_id, chunks)
    recovered = await _recoveries(cluster.dsn, run_id)
    assert [a for a, _ in recovered] == ["redeliver_result"], recovered
    assert "step 0 stored" in recovered[0][1]


async def test_a_lost_last_result_after_announced_steps_is_redelivered(services, settings, model, cluster):
    """With the worker announcing its continued step (decision 103) the first result the
    orchestrator gets is the run's last: lost, it is redelivered from the store, and the run ends
    once, its steps announced once each."""
    thread = f"th-sweep-last-{uuid.uuid4().hex[:6]}"
    await model.aqueue([ms.tool_calls(ms.tool_call("chaos_effect", {"n": 1}))], model=f"threadline-chaos-{thread}-s0")
    await model.aqueue([ms.text("All done.")], model=f"threadline-chaos-{thread}-s1")
    # step 0 waits half a second after its tool ran: the orchestrator's start announcement is out
    # by then, so the worker's statement announces step 0 (no other writer's row waits)
    with swapped(services, "sw2b", worker_env={"THREADLINE_PAUSE_POINTS": "after_tool_result_stored",
                                               "THREADLINE_PAUSE_SECONDS": "0.5", "THREADLINE_PAUSE_MATCH": thread},
                 orchestrator_env={"THREADLINE_FAIL_POINTS": "drop_step_result", "THREADLINE_FAIL_MATCH": thread}):
        run_id, chunks = await _run(settings, "chaos", thread)
        assert await wait_idle(cluster.dsn, thread)
    row = await run_row(cluster.dsn, run_id)
    assert row["status"] == "finished" and row["steps_done"] == 2 and row["results_applied"] == 2
    _stream_ok(run_id, chunks)
    recovered = await _recoveries(cluster.dsn, run_id)
    assert [a for a, _ in recovered] == ["redeliver_result"], recovered
    assert "run finished in the store" in recovered[0][1]
    life = [(e["type"], e.get("step")) for e in await read_lifecycle(cluster.bootstrap, f"{cluster.prefix}.lifecycle",
                                                                       thread_id=thread)]
    assert life == [("thread_active", None), ("run_started", None), ("step_finished", 0), ("step_finished", 1),
                    ("run_finished", None), ("thread_idle", None)]


async def test_a_run_that_cannot_go_on_is_failed_with_the_reason(services, settings, cluster):
    thread = f"th-sweep-fail-{uuid.uuid4().hex[:6]}"
    with swapped(services, "sw3", worker_env={"THREADLINE_FAIL_POINTS": "drop_step_task", "THREADLINE_FAIL_TIMES": "99",
                                              "THREADLINE_FAIL_MATCH": thread},
                 orchestrator_env={"THREADLINE_SWEEP_MAX_RECOVERIES": "1"}):
        run_id, chunks = await _run(settings, "echo-agent", thread)
        assert await wait_idle(cluster.dsn, thread)
    row = await run_row(cluster.dsn, run_id)
    assert row["status"] == "failed" and row["error"]["kind"] == "stuck", dict(row)
    assert "after 1 recoveries" in row["error"]["message"]
    assert [c["type"] for c in chunks][-2:] == ["error", "finish"]
    _stream_ok(run_id, chunks)
    assert [a for a, _ in await _recoveries(cluster.dsn, run_id)] == ["reschedule", "fail"]

"""The sweeper's recoveries (run-orchestrator, :mod:`threadline.flows.sweeper`): drive on a run
claimed by :func:`threadline.store.recoveries.claim` as :func:`threadline.orchestration.recovery.decide`
said — each action in one transaction with its outgoing events in the outbox and a
``run_recoveries`` row."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from threadline.events import LifecycleEvent, RunResult, StepResult, StepTask, chunks
from threadline.events.chunk_types import ChunkBody
from threadline.flows.orchestration import TERMINAL, announce_start, hand_over
from threadline.flows.terminal import add_terminal
from threadline.orchestration.recovery import RunSnapshot
from threadline.store import leases, outbox
from threadline.store import recoveries as rows
from threadline.store.runs import claim_terminal, insert_signal_message
from threadline.store.sub_agents import abort_children, child_ended
from threadline.topics import Topics, thread_key


def snapshot(row: asyncpg.Record) -> RunSnapshot:
    """The pure decision's view of a claimed row."""
    return RunSnapshot(status=row["status"], step=row["step"], steps_done=row["steps_done"], idle_s=row["idle_s"],
                       heartbeat_age_s=row["heartbeat_age_s"] if row["step_owner"] is not None else None,
                       holds_lease=row["holds_lease"], outbox_pending=row["outbox_pending"],
                       recoveries=row["recoveries"], results_applied=row.get("results_applied"))


async def reschedule(conn: asyncpg.Connection, run: asyncpg.Record, topics: Topics, *, reason: str,
                     instance: str) -> list[int]:
    """A new step task for the run's current step; the dead owner's heartbeat is cleared (as a
    hand-back), so the worker that gets the task re-executes the step at once under the next
    attempt. Returns the outbox ids."""
    key = thread_key(run["resource_id"], run["thread_id"])
    await rows.clear_heartbeat(conn, run["run_id"])
    task = StepTask(run_id=run["run_id"], resource_id=run["resource_id"], thread_id=run["thread_id"],
                    step=run["step"], attempt=run["attempt"], epoch=run["epoch"])
    await rows.note(conn, run, "reschedule", reason, instance)
    return [await outbox.add(conn, topics.step_tasks, task, key=key)]


def _running_outcome(run: asyncpg.Record) -> str:
    """The stored outcome of a running run's last step: ``suspended`` when its state holds the
    sub-agent calls (decision 77) or the calls held for approval (decision 226) the step waits
    for, else ``continue``."""
    state = run["state"] or {}
    return "suspended" if state.get("sub_agent_calls") or state.get("approval_calls") else "continue"


def _stored_result(run: asyncpg.Record) -> StepResult:
    status = run["status"]
    return StepResult(run_id=run["run_id"], resource_id=run["resource_id"], thread_id=run["thread_id"],
                      step=run["step"], attempt=run["attempt"], epoch=run["epoch"],
                      outcome=_running_outcome(run) if status == "running" else status,
                      finish_reason=run["finish_reason"], text=run["text"], usage=run["usage"] or {},
                      error=run["error"], tripwire=run["tripwire"])


async def redeliver_result(conn: asyncpg.Connection, run: asyncpg.Record, topics: Topics, *, reason: str,
                           instance: str) -> list[int]:
    """Publish the stored result of the run's last step again: its outbox row is marked
    unpublished (same event id: an orchestrator that applied it drops the copy). Without such a
    row (or when the orchestrator already recorded that event), a result is rebuilt from the run
    row — for a ``continue`` the orchestrator's own guard (``step``/``steps_done``) makes a copy
    harmless. Returns the outbox ids."""
    key = thread_key(run["resource_id"], run["thread_id"])
    await rows.touch(conn, run["run_id"])
    await rows.note(conn, run, "redeliver_result", reason, instance)
    # from the first result not applied (a worker may have continued the run past a lost one,
    # decision 32) to the run's current step, each step's latest stored result, in order
    first = run.get("results_applied")
    first = run["step"] if first is None else min(first, run["step"])
    latest: dict[int, tuple[int, str | None]] = {}
    for row in await rows.recent_records(conn, key, topics.step_results):
        try:
            body: dict[str, Any] = orjson.loads(row["value"])
        except orjson.JSONDecodeError:
            continue
        step = body.get("step")
        if body.get("run_id") != run["run_id"] or not isinstance(step, int) or not first <= step <= run["step"]:
            continue
        latest.setdefault(step, (row["id"], body.get("event_id")))
    again: list[int] = []
    for step in sorted(latest):
        box_id, event_id = latest[step]
        if not await rows.applied_by_orchestrator(conn, event_id):
            again.append(box_id)
    if again and latest.get(run["step"], (None,))[0] in again:
        await outbox.unpublish(conn, again)
        return again
    if again:  # the current step's result is applied or gone: the earlier ones, then it rebuilt
        await outbox.unpublish(conn, again)
    return [*again, await outbox.add(conn, topics.step_results, _stored_result(run), key=key)]


async def fail(conn: asyncpg.Connection, run: asyncpg.Record, topics: Topics, *, reason: str, instance: str,
               lease_ttl_s: float) -> list[int]:
    """End a run that cannot go on: ``failed`` with ``error {kind: "stuck", message: reason}``.

    Its stream ends with ``error`` + ``finish`` (after an ``attempt-discarded`` for an attempt
    left outstanding) unless its terminal chunks were already claimed; ``run_failed`` (or the
    terminal event of the status it already has) is announced; the lease moves on (epoch + 1,
    so a late write of the old owner is fenced) and what waits for the thread starts.
    Returns the outbox ids.
    """
    key = thread_key(run["resource_id"], run["thread_id"])
    error = {"kind": "stuck", "message": reason}
    ids: list[int] = await announce_start(conn, run, topics)  # a run ingress started, never announced
    await rows.note(conn, run, "fail", reason, instance)
    status = run["status"]
    if status == "running":
        status = "failed"
        await rows.fail_run(conn, run["run_id"], error)
        claimed = await claim_terminal(conn, run["run_id"])
        if claimed is not None:
            step, attempt, seq = claimed["step"], claimed["attempt"], claimed["next_seq"]
            terminal: list[ChunkBody] = []
            if claimed["outstanding"]:
                terminal.append(chunks.attempt_discarded_chunk(step, attempt, "stuck"))
                attempt += 1
            terminal += [chunks.error_chunk(error), chunks.finish_chunk("error", finish_reason="error", with_output=False)]
            stamped = [chunks.envelope(chunk, run_id=run["run_id"], step=step, attempt=attempt, seq=seq + i)
                       for i, chunk in enumerate(terminal)]
            ids += await add_terminal(conn, run, stamped, topics)  # a child's nested on its parent's too
            await rows.set_next_seq(conn, run["run_id"], seq + len(terminal))
    event = {"failed": "run_failed"}.get(status) or TERMINAL.get(status, "run_failed")
    base = {"resource_id": run["resource_id"], "thread_id": run["thread_id"], "run_id": run["run_id"],
            "agent_id": run["agent_id"]}
    extra = {"finish_reason": "error", "error": error} if run["status"] == "running" else {
        "finish_reason": run["finish_reason"], "error": run["error"], "tripwire": run["tripwire"]}
    ids.append(await outbox.add(conn, topics.lifecycle, LifecycleEvent(type=event, **base, **extra), key=key))
    if run["kind"] == "generate" and run["request_id"]:
        reply = RunResult(request_id=run["request_id"], run_id=run["run_id"], text=run["text"] or "",
                          finish_reason=extra["finish_reason"] or "error", steps=(run["state"] or {}).get("steps", []),
                          error=extra["error"])
        ids.append(await outbox.add(conn, run["reply_to"] or topics.replies, reply, key=run["request_id"]))
    # the run's own input, and what it drained, end with it (as on abort); the user's words stay
    for payload in await rows.end_signals(conn, run["run_id"]):
        await insert_signal_message(conn, payload, thread_id=run["thread_id"], resource_id=run["resource_id"],
                                    run_id=run["run_id"])
    await leases.vacate(conn, run["thread_id"], run["run_id"])
    ids.append(await hand_over(conn, run, topics, lease_ttl_s))
    ids += await abort_children(conn, run["run_id"], topics)
    if run["parent_run_id"] is not None and run["status"] == "running":
        ids += await child_ended(conn, run, "failed", None, error, topics, lease_ttl_s)
    return ids

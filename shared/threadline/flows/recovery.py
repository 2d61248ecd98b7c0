"""The sweeper's reads and writes (run-orchestrator, :mod:`threadline.flows.sweeper`): find runs that
may be stuck, claim one (``FOR UPDATE SKIP LOCKED``: whichever orchestrator instance locks it
first handles it, the others skip it), and drive it on — each action in one transaction with
its outgoing events in the outbox and a ``run_recoveries`` row."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from threadline.events import LifecycleEvent, RunResult, StepResult, StepTask, chunks
from threadline.events.signals import signal_to_message
from threadline.flows.orchestration import TERMINAL, announce_start, claim_terminal, hand_over
from threadline.orchestration.recovery import RunSnapshot
from threadline.store import leases, outbox
from threadline.store.sub_agents import abort_children, child_ended
from threadline.topics import Topics, thread_key

_CANDIDATES = """
SELECT run_id FROM runs
WHERE status = 'running' AND NOT waiting_children AND updated_at < now() - make_interval(secs => $1)
  AND (step_heartbeat IS NULL OR step_heartbeat < now() - make_interval(secs => $1))
UNION
SELECT r.run_id FROM thread_leases l JOIN runs r ON r.run_id = l.run_id AND r.epoch = l.epoch
WHERE l.run_id IS NOT NULL AND r.status <> 'running' AND r.updated_at < now() - make_interval(secs => $1)
LIMIT $2
"""

_CLAIM = """
SELECT r.*, extract(epoch FROM now() - r.updated_at)::float8 AS idle_s,
       extract(epoch FROM now() - r.step_heartbeat)::float8 AS heartbeat_age_s,
       coalesce(l.run_id = r.run_id AND l.epoch = r.epoch, false) AS holds_lease,
       EXISTS (SELECT 1 FROM outbox o WHERE o.published_at IS NULL AND o.key = $2
               AND o.created_at > now() - make_interval(secs => $3)) AS outbox_pending,
       (SELECT count(*) FROM run_recoveries x WHERE x.run_id = r.run_id AND x.step = r.step)::int AS recoveries
FROM runs r LEFT JOIN thread_leases l ON l.thread_id = r.thread_id
WHERE r.run_id = $1
FOR UPDATE OF r SKIP LOCKED
"""


async def candidates(conn: asyncpg.Connection, *, stuck_after_s: float, limit: int = 200) -> list[str]:
    """Ids of runs that hold their thread and showed no progress for ``stuck_after_s`` (a cheap
    pre-filter; :func:`claim` takes the lock and the full snapshot)."""
    return [r["run_id"] for r in await conn.fetch(_CANDIDATES, stuck_after_s, limit)]


async def claim(conn: asyncpg.Connection, run_id: str, *, stuck_after_s: float) -> asyncpg.Record | None:
    """Lock ``run_id`` for this transaction and return its row with the snapshot fields
    (``idle_s``, ``heartbeat_age_s``, ``holds_lease``, ``outbox_pending``, ``recoveries``);
    ``None`` when another transaction holds it or its thread's lease row (a worker saving a
    step, an orchestrator applying a result: the run is not stuck then), or it is gone. The
    lease row is locked first (``threadline.store.leases``: the lock order)."""
    run = await conn.fetchrow("SELECT resource_id, thread_id FROM runs WHERE run_id = $1", run_id)
    if run is None:
        return None
    if not await leases.lock_row(conn, run["thread_id"], skip_locked=True) and await conn.fetchval(
            "SELECT 1 FROM thread_leases WHERE thread_id = $1", run["thread_id"]):
        return None
    return await conn.fetchrow(_CLAIM, run_id, thread_key(run["resource_id"], run["thread_id"]), stuck_after_s)


def snapshot(row: asyncpg.Record) -> RunSnapshot:
    """The pure decision's view of a claimed row."""
    return RunSnapshot(status=row["status"], step=row["step"], steps_done=row["steps_done"], idle_s=row["idle_s"],
                       heartbeat_age_s=row["heartbeat_age_s"] if row["step_owner"] is not None else None,
                       holds_lease=row["holds_lease"], outbox_pending=row["outbox_pending"],
                       recoveries=row["recoveries"], results_applied=row.get("results_applied"))


async def _note(conn: asyncpg.Connection, run: asyncpg.Record, action: str, reason: str, instance: str) -> None:
    await conn.execute("INSERT INTO run_recoveries (run_id, step, attempt, action, reason, instance) "
                       "VALUES ($1, $2, $3, $4, $5, $6)", run["run_id"], run["step"], run["attempt"], action,
                       reason, instance)


async def reschedule(conn: asyncpg.Connection, run: asyncpg.Record, topics: Topics, *, reason: str,
                     instance: str) -> list[int]:
    """A new step task for the run's current step; the dead owner's heartbeat is cleared (as a
    hand-back), so the worker that gets the task re-executes the step at once under the next
    attempt. Returns the outbox ids."""
    key = thread_key(run["resource_id"], run["thread_id"])
    await conn.execute("UPDATE runs SET step_heartbeat = NULL, updated_at = now() WHERE run_id = $1", run["run_id"])
    task = StepTask(run_id=run["run_id"], resource_id=run["resource_id"], thread_id=run["thread_id"],
                    step=run["step"], attempt=run["attempt"], epoch=run["epoch"])
    await _note(conn, run, "reschedule", reason, instance)
    return [await outbox.add(conn, topics.step_tasks, task, key=key)]


def _running_outcome(run: asyncpg.Record) -> str:
    """The stored outcome of a running run's last step: ``suspended`` when its state holds the
    sub-agent calls the step waits for (decision 77), else ``continue``."""
    return "suspended" if (run["state"] or {}).get("sub_agent_calls") else "continue"


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
    await conn.execute("UPDATE runs SET updated_at = now() WHERE run_id = $1", run["run_id"])
    await _note(conn, run, "redeliver_result", reason, instance)
    # from the first result not applied (a worker may have continued the run past a lost one,
    # decision 32) to the run's current step, each step's latest stored result, in order
    first = run.get("results_applied")
    first = run["step"] if first is None else min(first, run["step"])
    latest: dict[int, tuple[int, str | None]] = {}
    for row in await conn.fetch("SELECT id, value FROM outbox WHERE key = $1 AND topic = $2 ORDER BY id DESC LIMIT 50",
                                key, topics.step_results):
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
        applied = await conn.fetchval("SELECT 1 FROM processed_events WHERE consumer = 'orchestrator' "
                                      "AND event_id = $1", event_id)
        if not applied:
            again.append(box_id)
    if again and latest.get(run["step"], (None,))[0] in again:
        await conn.execute("UPDATE outbox SET published_at = NULL WHERE id = ANY($1::bigint[])", again)
        return again
    if again:  # the current step's result is applied or gone: the earlier ones, then it rebuilt
        await conn.execute("UPDATE outbox SET published_at = NULL WHERE id = ANY($1::bigint[])", again)
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
    await _note(conn, run, "fail", reason, instance)
    status = run["status"]
    if status == "running":
        status = "failed"
        await conn.execute("UPDATE runs SET status = 'failed', finish_reason = 'error', error = $2, "
                           "finished_at = now(), updated_at = now() WHERE run_id = $1", run["run_id"], error)
        claimed = await claim_terminal(conn, run["run_id"])
        if claimed is not None:
            step, attempt, seq = claimed["step"], claimed["attempt"], claimed["next_seq"]
            terminal = []
            if claimed["outstanding"]:
                terminal.append(chunks.attempt_discarded_chunk(step, attempt, "stuck"))
                attempt += 1
            terminal += [chunks.error_chunk(error), chunks.finish_chunk("error", finish_reason="error", with_output=False)]
            topic = topics.chunks(run["resource_id"], run["thread_id"])
            for i, chunk in enumerate(terminal):
                body = chunks.envelope(chunk, run_id=run["run_id"], step=step, attempt=attempt, seq=seq + i)
                ids.append(await outbox.add_raw(conn, topic, orjson.dumps(body), key=key, headers=chunks.chunk_headers()))
            await conn.execute("UPDATE runs SET next_seq = $2 WHERE run_id = $1", run["run_id"], seq + len(terminal))
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
    ended = await conn.fetch(
        "UPDATE signals SET status = 'consumed', consumed_by_run = run_id, consumed_at = now() "
        "WHERE run_id = $1 AND status = 'pending' AND (mode IN ('wake', 'queue') OR drained_step IS NOT NULL) "
        "RETURNING payload", run["run_id"])
    for sig in ended:
        msg = signal_to_message(sig["payload"], thread_id=run["thread_id"], resource_id=run["resource_id"])
        await conn.execute(
            "INSERT INTO messages (id, thread_id, resource_id, run_id, role, type, content) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING",
            msg["id"], run["thread_id"], run["resource_id"], run["run_id"], msg["role"], msg.get("type"),
            msg["content"])
    await conn.execute("UPDATE thread_leases SET run_id = NULL, expires_at = NULL, epoch = epoch + 1, "
                       "updated_at = now() WHERE thread_id = $1 AND run_id = $2", run["thread_id"], run["run_id"])
    ids.append(await hand_over(conn, run, topics, lease_ttl_s))
    ids += await abort_children(conn, run["run_id"], topics)
    if run["parent_run_id"] is not None and run["status"] == "running":
        ids += await child_ended(conn, run, "failed", None, error, topics, lease_ttl_s)
    return ids

"""The run state machine's writes (run-orchestrator): schedule steps, end runs, release or hand
over the lease, and start the next queued turn — each transition in one transaction with its
outgoing events in the outbox."""

from __future__ import annotations

from typing import Any

import asyncpg

import orjson

from threadline.events import Aborted, AbortRun, LifecycleEvent, RunResult, StartRun, StepResult, StepTask
from threadline.events.base import Event
from threadline.ids import new_id
from threadline.runtime.signals import signal_to_message
from threadline.store import leases, outbox
from threadline.store.routing import create_run
from threadline.topics import Topics, thread_key

TERMINAL = {"finished": "run_finished", "failed": "run_failed", "tripwire": "run_tripwire",
            "aborted": "run_aborted"}


async def _first_time(conn: asyncpg.Connection, event_id: str) -> bool:
    return await conn.fetchval(
        "INSERT INTO processed_events (consumer, event_id) VALUES ('orchestrator', $1) "
        "ON CONFLICT DO NOTHING RETURNING true", event_id) is not None


async def start_run(conn: asyncpg.Connection, cmd: StartRun, topics: Topics) -> list[int]:
    """Schedule step 0 of a new run; announce ``run_started`` / ``thread_active``."""
    ids: list[int] = []
    async with conn.transaction():
        if not await _first_time(conn, cmd.event_id):
            return ids
        run = await conn.fetchrow("SELECT * FROM runs WHERE run_id = $1 FOR UPDATE", cmd.run_id)
        if run is None or run["status"] != "running" or run["epoch"] != cmd.epoch or run["steps_done"] > 0:
            return ids
        key = thread_key(run["resource_id"], run["thread_id"])
        task = StepTask(run_id=run["run_id"], resource_id=run["resource_id"], thread_id=run["thread_id"],
                        step=0, attempt=run["attempt"], epoch=run["epoch"])
        ids.append(await outbox.add(conn, topics.step_tasks, task, key=key))
        for kind in (("run_started",) if cmd.handover else ("thread_active", "run_started")):
            ids.append(await outbox.add(conn, topics.lifecycle, _life(kind, run), key=key))
    return ids


async def on_step_result(conn: asyncpg.Connection, res: StepResult, topics: Topics,
                         lease_ttl_s: float) -> list[int]:
    """Schedule the next step, or end the run and hand the thread to what is queued."""
    ids: list[int] = []
    async with conn.transaction():
        if not await _first_time(conn, res.event_id):
            return ids
        run = await conn.fetchrow("SELECT * FROM runs WHERE run_id = $1 FOR UPDATE", res.run_id)
        if run is None or run["epoch"] != res.epoch or run["status"] == "aborted":
            return ids  # an aborted run was ended by abort_run
        key = thread_key(run["resource_id"], run["thread_id"])
        if res.outcome == "continue":
            updated = await conn.fetchval(
                "UPDATE runs SET step = step + 1, attempt = 1, step_started = false, updated_at = now() WHERE run_id = $1 "
                "AND step = $2 AND steps_done = $2 + 1 AND status = 'running' RETURNING step",
                res.run_id, res.step)
            if updated is None:
                return ids
            await leases.check(conn, run["thread_id"], run["run_id"], run["epoch"], renew_s=lease_ttl_s)
            task = StepTask(run_id=run["run_id"], resource_id=run["resource_id"], thread_id=run["thread_id"],
                            step=updated, attempt=1, epoch=run["epoch"])
            ids.append(await outbox.add(conn, topics.step_tasks, task, key=key))
            ids.append(await outbox.add(conn, topics.lifecycle, _life("step_finished", run, step=res.step),
                                        key=key))
            return ids
        # the run is over
        ids.append(await outbox.add(conn, topics.lifecycle, _life("step_finished", run, step=res.step), key=key))
        ids.append(await outbox.add(conn, topics.lifecycle, _life(
            TERMINAL[res.outcome], run, finish_reason=res.finish_reason, error=res.error,
            tripwire=res.tripwire), key=key))
        if run["kind"] == "generate" and run["request_id"]:
            reply = RunResult(request_id=run["request_id"], run_id=run["run_id"], text=res.text or "",
                              finish_reason=res.finish_reason or "other", usage=res.usage,
                              steps=(run["state"] or {}).get("steps", []), tripwire=res.tripwire,
                              error=res.error)
            ids.append(await outbox.add(conn, run["reply_to"] or topics.replies, reply, key=run["request_id"]))
        await leases.release(conn, run["thread_id"], run["run_id"], run["epoch"])
        ids.append(await _hand_over(conn, run, topics, lease_ttl_s))
    return ids


async def start_next(conn: asyncpg.Connection, prev: asyncpg.Record, topics: Topics,
                     lease_ttl_s: float) -> int | None:
    """Start a run for the oldest waiting input of the thread: signals delivered to ``prev``
    after its last drain first, then queued turns. Returns the StartRun outbox id."""
    sig = await conn.fetchrow(
        "SELECT * FROM signals WHERE thread_id = $1 AND status = 'pending' "
        "AND (run_id = $2 OR (mode = 'queue' AND run_id IS NULL)) ORDER BY (mode = 'queue'), seq LIMIT 1",
        prev["thread_id"], prev["run_id"])
    if sig is None:
        return None
    lease = await leases.lock_thread(conn, prev["resource_id"], prev["thread_id"])
    if lease.active:
        return None  # someone else holds the thread; it will drain when it ends
    opts: dict[str, Any] = dict(sig["options"] or {})
    run_id = opts.pop("run_id", None) or new_id("run")  # a queued turn keeps the id its reply named
    epoch = await leases.take(conn, lease, run_id, lease_ttl_s)
    kind = opts.pop("kind", None)
    reply_to = opts.pop("reply_to", None)
    options = opts if sig["mode"] == "queue" else dict(prev["options"] or {})
    await create_run(conn, run_id=run_id, agent_id=sig["agent_id"] or prev["agent_id"],
                     resource_id=prev["resource_id"], thread_id=prev["thread_id"], epoch=epoch,
                     options=options, kind="generate" if kind == "generate" else "stream",
                     request_id=sig["request_id"], reply_to=reply_to or topics.replies)
    # the signal is the new run's input now (a leftover delivery becomes a wake)
    await conn.execute("UPDATE signals SET run_id = $2, mode = CASE WHEN mode = 'deliver' THEN 'wake' ELSE mode END "
                       "WHERE id = $1", sig["id"], run_id)
    start = StartRun(run_id=run_id, resource_id=prev["resource_id"], thread_id=prev["thread_id"], epoch=epoch,
                     handover=True)
    return await outbox.add(conn, topics.run_commands, start,
                            key=thread_key(prev["resource_id"], prev["thread_id"]))


async def _hand_over(conn: asyncpg.Connection, run: asyncpg.Record, topics: Topics, lease_ttl_s: float) -> int:
    """After a run ended: start what waits for the thread, or announce ``thread_idle``."""
    started = await start_next(conn, run, topics, lease_ttl_s)
    if started is not None:
        return started
    return await outbox.add(conn, topics.lifecycle, _life("thread_idle", run, run_id=None),
                            key=thread_key(run["resource_id"], run["thread_id"]))


def _life(kind: str, run: asyncpg.Record, **fields: Any) -> Event:
    base = {"resource_id": run["resource_id"], "thread_id": run["thread_id"], "run_id": run["run_id"],
            "agent_id": run["agent_id"]}
    base.update(fields)
    return LifecycleEvent(type=kind, **base)  # type: ignore[arg-type]


ABORT_CHANNEL = "threadline_abort"
"""Postgres NOTIFY channel: the id of every aborted run, so the worker running it stops now."""


async def claim_terminal(conn: asyncpg.Connection, run_id: str) -> asyncpg.Record | None:
    """Claim the right to emit the run's terminal chunks (exactly one emitter per run).
    ``outstanding``: an attempt of the current step started and did not store its result."""
    return await conn.fetchrow(
        "UPDATE runs SET terminal_emitted = true WHERE run_id = $1 AND NOT terminal_emitted "
        "RETURNING next_seq, step, attempt, step_started AND steps_done = step AS outstanding", run_id)


def abort_chunks(run_id: str, *, step: int, attempt: int, seq: int) -> list[dict[str, Any]]:
    """``abort`` then ``finish {stepResult.reason: "abort"}`` (DECISIONS 15)."""
    base = {"runId": run_id, "step": step, "attempt": attempt, "from": "AGENT"}
    return [{**base, "type": "abort", "payload": {}, "seq": seq},
            {**base, "type": "finish", "seq": seq + 1,
             "payload": {"stepResult": {"reason": "abort"}, "finishReason": "abort"}}]


async def abort_run(conn: asyncpg.Connection, cmd: AbortRun, topics: Topics, lease_ttl_s: float) -> list[int]:
    """End the thread's active run with ``abort`` (seed ``subscription.abort()``).

    The run is marked aborted and the lease moves on (epoch + 1), so every later write of the
    run is fenced; the worker running it is told through NOTIFY and stops its model call. The
    run's terminal chunks are emitted here when no step is outstanding, else by that worker.
    What was queued behind the run still runs (C18).
    """
    ids: list[int] = []
    reply_topic = cmd.reply_to or topics.replies
    key = thread_key(cmd.resource_id, cmd.thread_id)
    async with conn.transaction():
        if not await _first_time(conn, cmd.event_id):
            return ids
        lease = await leases.lock_thread(conn, cmd.resource_id, cmd.thread_id)
        target = lease.run_id if lease.active else None
        if cmd.run_id is not None and cmd.run_id != target:
            target = None
        run = await conn.fetchrow("SELECT * FROM runs WHERE run_id = $1 FOR UPDATE", target) if target else None
        if run is None or run["status"] != "running":
            if cmd.request_id:
                ids.append(await outbox.add(conn, reply_topic, Aborted(request_id=cmd.request_id, aborted=False),
                                            key=cmd.request_id))
            return ids
        await conn.execute("UPDATE runs SET status = 'aborted', finish_reason = 'abort', finished_at = now(), "
                           "updated_at = now() WHERE run_id = $1", run["run_id"])
        await conn.execute("UPDATE thread_leases SET run_id = NULL, expires_at = NULL, epoch = epoch + 1, "
                           "updated_at = now() WHERE thread_id = $1", run["thread_id"])
        await conn.execute("SELECT pg_notify($1, $2)", ABORT_CHANNEL, run["run_id"])
        # the run's own input, and what it already drained, end with it; messages delivered to
        # it but not yet drained are answered by the runs that follow (C18)
        ended = await conn.fetch(
            "UPDATE signals SET status = 'consumed', consumed_by_run = run_id, consumed_at = now() "
            "WHERE run_id = $1 AND status = 'pending' AND (mode IN ('wake', 'queue') OR drained_step IS NOT NULL) "
            "RETURNING payload", run["run_id"])
        for sig in ended:  # the user's words stay in the thread even though the run was stopped
            msg = signal_to_message(sig["payload"], thread_id=run["thread_id"], resource_id=run["resource_id"])
            await conn.execute(
                "INSERT INTO messages (id, thread_id, resource_id, run_id, role, type, content) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING",
                msg["id"], run["thread_id"], run["resource_id"], run["run_id"], msg["role"], msg.get("type"),
                msg["content"])
        if run["steps_done"] == run["step"] + 1:  # no step outstanding: nobody else will end the stream
            claimed = await claim_terminal(conn, run["run_id"])
            if claimed is not None:
                topic = topics.chunks(run["resource_id"], run["thread_id"])
                for chunk in abort_chunks(run["run_id"], step=claimed["step"], attempt=claimed["attempt"],
                                          seq=claimed["next_seq"]):
                    ids.append(await outbox.add_raw(conn, topic, orjson.dumps(chunk), key=key,
                                                    headers=[("tl-type", b"chunk")]))
        ids.append(await outbox.add(conn, topics.lifecycle, _life("run_aborted", run, finish_reason="abort"), key=key))
        if run["kind"] == "generate" and run["request_id"]:
            result = RunResult(request_id=run["request_id"], run_id=run["run_id"], text=run["text"] or "",
                               finish_reason="abort", steps=(run["state"] or {}).get("steps", []))
            ids.append(await outbox.add(conn, run["reply_to"] or topics.replies, result, key=run["request_id"]))
        if cmd.request_id:
            ids.append(await outbox.add(conn, reply_topic, Aborted(request_id=cmd.request_id, aborted=True,
                                                                   run_id=run["run_id"]), key=cmd.request_id))
        ids.append(await _hand_over(conn, run, topics, lease_ttl_s))
    return ids

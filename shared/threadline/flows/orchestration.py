"""The run state machine's writes (run-orchestrator): schedule steps, end runs, release or hand
over the lease, and start the next queued turn — each transition decided by
:mod:`threadline.orchestration.runs` and written in one transaction with its outgoing events in
the outbox."""

from __future__ import annotations

from collections.abc import Mapping

import asyncpg

from threadline.events import Aborted, AbortRun, LifecycleEvent, RunResult, StartRun, StepResult, StepTask
from threadline.events.base import Event
from threadline.events.chunks import abort_chunks, envelope
from threadline.events.codec import encode
from threadline.flows.terminal import add_terminal
from threadline.logging import get_logger
from threadline.orchestration import runs as transitions
from threadline.orchestration.runs import (
    TERMINAL,
    AbortActive,
    Announce,
    AnnounceStart,
    Defer,
    EndRun,
    Ignore,
    RunRow,
    SuspendRun,
    WaitingInput,
    abort_target,
    next_run,
    on_abort,
    on_start_run,
    unannounced_start,
)
from threadline.store import leases, outbox
from threadline.store import runs as rows
from threadline.store.announce import announce_step
from threadline.store.listen import notify
from threadline.store.processed import claim_event
from threadline.store.recoveries import end_signals
from threadline.store.runs import claim_terminal, create_run, insert_signal_message
from threadline.store.sub_agents import abort_children, child_ended, start_children
from threadline.topics import Topics, thread_key

log = get_logger(__name__)

__all__ = ["ABORT_CHANNEL", "TERMINAL", "abort_run", "announce_on", "announce_start", "announced", "apply_step_result",
           "lifecycle_event", "on_step_result", "start_next", "start_run"]


async def _run_for_update(conn: asyncpg.Connection, run_id: str | None) -> asyncpg.Record | None:
    return None if run_id is None else await rows.lock_run(conn, run_id)


async def announce_start(conn: asyncpg.Connection, run: asyncpg.Record, topics: Topics) -> list[int]:
    """In the caller's transaction, with ``run``'s row locked: announce the start of a run whose
    step 0 ingress scheduled, if nobody did yet (:func:`~threadline.orchestration.runs.unannounced_start`),
    so ``thread_active`` / ``run_started`` come before anything else the orchestrator says about
    the run. Returns the outbox ids (none when it was announced already)."""
    kinds = unannounced_start(RunRow.of(run))
    if not kinds:
        return []
    await rows.mark_start_announced(conn, run["run_id"])
    key = thread_key(run["resource_id"], run["thread_id"])
    return [await outbox.add(conn, topics.lifecycle, lifecycle_event(kind, run), key=key) for kind in kinds]


async def start_run(conn: asyncpg.Connection, cmd: StartRun, topics: Topics) -> list[int]:
    """Schedule step 0 of a new run; announce ``run_started`` / ``thread_active``. A ``scheduled``
    command (ingress published step 0's task) only announces the start, once."""
    ids: list[int] = []
    async with conn.transaction():
        if not await claim_event(conn, "orchestrator", cmd.event_id):
            return ids
        run = await _run_for_update(conn, cmd.run_id)
        move = on_start_run(RunRow.of(run) if run is not None else None, cmd)
        if isinstance(move, Ignore) or run is None:
            return ids
        if isinstance(move, AnnounceStart):
            return await announce_start(conn, run, topics)
        key = thread_key(run["resource_id"], run["thread_id"])
        task = StepTask(run_id=run["run_id"], resource_id=run["resource_id"], thread_id=run["thread_id"],
                        step=move.step, attempt=move.attempt, epoch=run["epoch"])
        ids.append(await outbox.add(conn, topics.step_tasks, task, key=key))
        for kind in move.lifecycle:
            ids.append(await outbox.add(conn, topics.lifecycle, lifecycle_event(kind, run), key=key))
    return ids


async def announced(conn: asyncpg.Connection, res: StepResult, topics: Topics) -> list[int] | None:
    """A ``continue`` whose next step the worker claimed itself, announced outside a transaction:
    the run read unlocked, the move decided on it, then written by one statement
    (:func:`~threadline.store.announce.announce_step`) that holds the run's row lock only while it
    runs — the worker's next step writes the same row (and the orchestrator's transaction would
    hold it, with the lease row, over seven round trips).
    Returns the outbox ids, or ``None`` when the move is another one or the row changed meanwhile
    (the caller then applies the result in its transaction, which decides again under the locks)."""
    row = await rows.read_run(conn, res.run_id)
    return None if row is None else await announce_on(conn, res, row, topics)


async def announce_on(conn: asyncpg.Connection, res: StepResult, row: asyncpg.Record,
                      topics: Topics) -> list[int] | None:
    """:func:`announced` given the run's ``row`` as read without a lock (perhaps changed since)."""
    run = RunRow.of(row)
    move = transitions.on_step_result(run, res)
    if not isinstance(move, Announce) or unannounced_start(run):
        return None
    event = lifecycle_event("step_finished", row, step=move.finished_step)
    value, headers = encode(event)
    key = thread_key(row["resource_id"], row["thread_id"])
    box_id = await announce_step(conn, res, run, topic=topics.lifecycle, key=key, headers=headers, value=value)
    return None if box_id is None else [box_id]


async def on_step_result(conn: asyncpg.Connection, res: StepResult, topics: Topics,
                         lease_ttl_s: float) -> list[int]:
    """Schedule the next step, or end the run and hand the thread to what is queued."""
    if res.outcome == "continue" and (done := await announced(conn, res, topics)) is not None:
        return done
    return await apply_step_result(conn, res, topics, lease_ttl_s)


async def apply_step_result(conn: asyncpg.Connection, res: StepResult, topics: Topics,
                            lease_ttl_s: float) -> list[int]:
    """:func:`on_step_result` in one transaction holding the thread's lease row and the run's row."""
    ids: list[int] = []
    async with conn.transaction():
        await leases.lock_row(conn, res.thread_id)  # the lease row before the run's (leases.py)
        run = await _run_for_update(conn, res.run_id)
        move = transitions.on_step_result(RunRow.of(run) if run is not None else None, res)
        if isinstance(move, Defer):  # not recorded as processed: the sweeper publishes it again
            log.warning("step result deferred", run_id=res.run_id, step=res.step, reason=move.reason)
            return ids
        if not await claim_event(conn, "orchestrator", res.event_id):
            return ids
        if isinstance(move, Ignore) or run is None:
            return ids  # an aborted run was ended by abort_run
        ids += await announce_start(conn, run, topics)  # a result that overtook the run's scheduled StartRun
        key = thread_key(run["resource_id"], run["thread_id"])
        if isinstance(move, Announce):  # the worker claimed the next step with this one's store
            await rows.mark_results_applied(conn, res.run_id, res.step)
            ids.append(await outbox.add(conn, topics.lifecycle, lifecycle_event("step_finished", run, step=move.finished_step),
                                        key=key))
            return ids
        if isinstance(move, SuspendRun):  # sub-agent calls: the child runs start, the run waits (decision 77)
            if run["step"] == res.step and run["steps_done"] == res.step + 1 and run["status"] == "running":
                ids += await start_children(conn, run, res.step, topics, lease_ttl_s)
            return ids
        if not isinstance(move, EndRun):
            updated = await rows.advance_step(conn, res.run_id, res.step)
            if updated is None:
                return ids
            await leases.check(conn, run["thread_id"], run["run_id"], run["epoch"], renew_s=lease_ttl_s)
            task = StepTask(run_id=run["run_id"], resource_id=run["resource_id"], thread_id=run["thread_id"],
                            step=updated, attempt=move.attempt, epoch=run["epoch"])
            ids.append(await outbox.add(conn, topics.step_tasks, task, key=key))
            for kind in move.lifecycle:
                ids.append(await outbox.add(conn, topics.lifecycle, lifecycle_event(kind, run, step=res.step), key=key))
            return ids
        await rows.mark_results_applied(conn, res.run_id, res.step)
        ids.append(await outbox.add(conn, topics.lifecycle, lifecycle_event("step_finished", run, step=move.finished_step),
                                    key=key))
        ids.append(await outbox.add(conn, topics.lifecycle, lifecycle_event(
            move.terminal, run, finish_reason=res.finish_reason, error=res.error,
            tripwire=res.tripwire), key=key))
        if move.reply_result:
            reply = RunResult(request_id=run["request_id"], run_id=run["run_id"], text=res.text or "",
                              finish_reason=res.finish_reason or "other", usage=res.usage,
                              steps=await rows.run_steps(conn, res.run_id), tripwire=res.tripwire,
                              error=res.error)
            ids.append(await outbox.add(conn, run["reply_to"] or topics.replies, reply, key=run["request_id"]))
        await leases.release(conn, run["thread_id"], run["run_id"], run["epoch"])
        ids.append(await hand_over(conn, run, topics, lease_ttl_s))
        if run["parent_run_id"] is not None:  # a child run: its outcome is its parent's tool result
            ids += await child_ended(conn, run, TERMINAL_STATUS[move.terminal], res.text, res.error, topics,
                                     lease_ttl_s)
    return ids


TERMINAL_STATUS = {event: status for status, event in TERMINAL.items()}
"""Terminal lifecycle event → the run status it announces."""


async def start_next(conn: asyncpg.Connection, prev: asyncpg.Record, topics: Topics,
                     lease_ttl_s: float) -> int | None:
    """Start a run for the oldest waiting input of the thread: signals delivered to ``prev``
    after its last drain first, then queued turns. Returns the StartRun outbox id."""
    sig = await rows.next_waiting(conn, prev["thread_id"], prev["run_id"])
    if sig is None:
        return None
    lease = await leases.lock_thread(conn, prev["resource_id"], prev["thread_id"])
    if lease.active:
        return None  # someone else holds the thread; it will drain when it ends
    waiting = WaitingInput(mode=sig["mode"], agent_id=sig["agent_id"], request_id=sig["request_id"],
                           options=sig["options"] or {})
    new = next_run(waiting, prev["agent_id"], prev["options"], replies_topic=topics.replies)
    epoch = await leases.take(conn, lease, new.run_id, lease_ttl_s)
    await create_run(conn, run_id=new.run_id, agent_id=new.agent_id, resource_id=prev["resource_id"],
                     thread_id=prev["thread_id"], epoch=epoch, options=new.options, kind=new.kind,
                     request_id=sig["request_id"], reply_to=new.reply_to)
    # the signal is the new run's input now (a leftover delivery becomes a wake)
    await rows.give_signal(conn, sig["id"], new.run_id)
    start = StartRun(run_id=new.run_id, resource_id=prev["resource_id"], thread_id=prev["thread_id"], epoch=epoch,
                     handover=True)
    return await outbox.add(conn, topics.run_commands, start,
                            key=thread_key(prev["resource_id"], prev["thread_id"]))


async def hand_over(conn: asyncpg.Connection, run: asyncpg.Record, topics: Topics, lease_ttl_s: float) -> int:
    """After a run ended: start what waits for the thread, or announce ``thread_idle``."""
    started = await start_next(conn, run, topics, lease_ttl_s)
    if started is not None:
        return started
    return await outbox.add(conn, topics.lifecycle, lifecycle_event("thread_idle", run, run_id=None),
                            key=thread_key(run["resource_id"], run["thread_id"]))


def lifecycle_event(kind: str, run: Mapping[str, object], **fields: object) -> Event:
    """The lifecycle event ``kind`` of ``run`` (its ``resource_id``, ``thread_id``, ``run_id`` and
    ``agent_id``), with ``fields`` (``step``, ``finish_reason``, ...) added."""
    base = {"resource_id": run["resource_id"], "thread_id": run["thread_id"], "run_id": run["run_id"],
            "agent_id": run["agent_id"]}
    base.update(fields)
    return LifecycleEvent(type=kind, **base)  # kind is one of LifecycleEvent's literals


ABORT_CHANNEL = "threadline_abort"
"""Postgres NOTIFY channel: the id of every aborted run, so the worker running it stops now."""


async def abort_run(conn: asyncpg.Connection, cmd: AbortRun, topics: Topics, lease_ttl_s: float) -> list[int]:
    """End the thread's active run with ``abort``.

    The run is marked aborted and the lease moves on (epoch + 1), so every later write of the
    run is fenced; the worker running it is told through NOTIFY and stops its model call. The
    run's terminal chunks are emitted here when no step is outstanding, else by that worker.
    What was queued behind the run still runs.
    """
    ids: list[int] = []
    reply_topic = cmd.reply_to or topics.replies
    key = thread_key(cmd.resource_id, cmd.thread_id)
    async with conn.transaction():
        if not await claim_event(conn, "orchestrator", cmd.event_id):
            return ids
        lease = await leases.lock_thread(conn, cmd.resource_id, cmd.thread_id)
        run = await _run_for_update(conn, abort_target(lease.run_id if lease.active else None, cmd.run_id))
        move = on_abort(RunRow.of(run) if run is not None else None)
        if not isinstance(move, AbortActive) or run is None:
            if cmd.request_id:
                ids.append(await outbox.add(conn, reply_topic, Aborted(request_id=cmd.request_id, aborted=False),
                                            key=cmd.request_id))
            return ids
        ids += await announce_start(conn, run, topics)  # an abort that overtook the run's scheduled StartRun
        await rows.mark_aborted(conn, run["run_id"])
        await leases.revoke(conn, run["thread_id"])
        await notify(conn, ABORT_CHANNEL, run["run_id"])
        # the run's own input, and what it already drained, end with it; messages delivered to
        # it but not yet drained are answered by the runs that follow
        for payload in await end_signals(conn, run["run_id"]):
            # the user's words stay in the thread even though the run was stopped
            await insert_signal_message(conn, payload, thread_id=run["thread_id"],
                                        resource_id=run["resource_id"], run_id=run["run_id"])
        if move.emit_terminal:  # no step outstanding: nobody else will end the stream
            claimed = await claim_terminal(conn, run["run_id"])
            if claimed is not None:  # a child's are nested on its parent's topic too (decision 219)
                stamped = [envelope(chunk, run_id=run["run_id"], step=claimed["step"], attempt=claimed["attempt"],
                                    seq=claimed["next_seq"] + i) for i, chunk in enumerate(abort_chunks())]
                ids += await add_terminal(conn, run, stamped, topics)
        ids.append(await outbox.add(conn, topics.lifecycle, lifecycle_event("run_aborted", run, finish_reason="abort"), key=key))
        if move.reply_result:
            result = RunResult(request_id=run["request_id"], run_id=run["run_id"], text=run["text"] or "",
                               finish_reason="abort", steps=await rows.run_steps(conn, run["run_id"]))
            ids.append(await outbox.add(conn, run["reply_to"] or topics.replies, result, key=run["request_id"]))
        if cmd.request_id:
            ids.append(await outbox.add(conn, reply_topic, Aborted(request_id=cmd.request_id, aborted=True,
                                                                   run_id=run["run_id"]), key=cmd.request_id))
        ids.append(await hand_over(conn, run, topics, lease_ttl_s))
        ids += await abort_children(conn, run["run_id"], topics)
        if run["parent_run_id"] is not None:
            ids += await child_ended(conn, run, "aborted", None, None, topics, lease_ttl_s)
    return ids

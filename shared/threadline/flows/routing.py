"""Ingress's routing, made atomically in Postgres: with the thread's lease row locked, read the
thread's state, ask :func:`threadline.orchestration.routing.decide_route`, store the signal,
create the run on a wake, and write the reply and the orchestrator command to the outbox, all in
one transaction. With ``starts`` (``THREADLINE_INGRESS_STARTS``) a wake also schedules the new
run's step 0 by the orchestrator's own rule (:func:`~threadline.orchestration.runs.on_start_run`
on the run as created) and queues its step task (docs/decisions.md 34)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import orjson

from threadline._internal.faults import pause_point
from threadline.errors import ConfigurationError, InvalidEventError
from threadline.events import (
    AbortRequest,
    AbortRun,
    Accepted,
    ErrorReply,
    Persisted,
    ResolveToolCall,
    Skipped,
    StartRun,
    StepTask,
    ToolApprovalRequest,
)
from threadline.events.base import Event
from threadline.events.chunks import chunk_headers, synthetic_run_chunks
from threadline.events.messages import now_iso
from threadline.events.replies import REPLY_ADAPTER
from threadline.events.signals import signal_from_message
from threadline.ids import new_id
from threadline.orchestration.routing import (
    Deliver,
    Discard,
    Inbound,
    Lane,
    Persist,
    Queue,
    RoutableRequest,
    Skip,
    ThreadState,
    Wake,
    decide_route,
    decide_state,
)
from threadline.orchestration.runs import RunRow, ScheduleStep, on_start_run
from threadline.runtime.memory import Memory, for_run
from threadline.store import outbox
from threadline.store.arrival import Arrival, arrive
from threadline.store.leases import Lease
from threadline.store.processed import claim_event, remember, remembered
from threadline.store.queries import thread_owner
from threadline.store.runs import insert_signal, insert_signal_message, run_holder, signal_exists, store_run_input
from threadline.store.state_lanes import lock_lane, save_lane
from threadline.store.wake import NewRun, store_wake
from threadline.topics import Topics, thread_key

RunCheck = Callable[[Inbound], None]
"""Validates a request that starts a run (raises :class:`~threadline.errors.ConfigurationError`)."""


@dataclass(slots=True)
class Routed:
    """Outcome of routing one request: outbox ids to flush after commit, and the reply."""

    outbox_ids: list[int] = field(default_factory=list)
    reply: Event | None = None
    duplicate: bool = False
    chunk_topic: str | None = None
    """A chunk topic the outbox rows write to (must exist before they are published)."""


class RequestRejected(Exception):  # noqa: N818 - control flow, not a failure of ours
    """The request is well-formed but cannot be routed (answered with an error reply)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def other_resource(thread_id: str) -> RequestRejected:
    """The refusal of a request for a thread that belongs to another resource."""
    return RequestRejected("thread_owned_by_other_resource", f"thread {thread_id!r} belongs to another resource")


def _precheck(req: Inbound, agent_known: bool) -> tuple[dict[str, Any], None] | tuple[None, RequestRejected |
                                                                                       InvalidEventError]:
    """What is refused without the store: an unknown agent, a bad signal, bad memory options.
    Returns ``(signal, None)`` or ``(None, refusal)``."""
    try:
        if not agent_known:
            raise RequestRejected("unknown_agent", f"no agent with id {req.agent_id!r}")
        signal = signal_from_message(req.body, kind=req.signal_type, tag_name=req.tag_name, signal_id=req.signal_id)
        if req.kind in ("stream", "generate"):  # stored as a plain user message (signal_to_message)
            signal["userInput"] = True
        if req.run_options.get("memory_options") is not None:
            _check_memory_options(req.run_options["memory_options"])
    except (RequestRejected, InvalidEventError) as exc:
        return None, exc
    return signal, None


async def route(conn: asyncpg.Connection, req: RoutableRequest | Inbound, *, topics: Topics, lease_ttl_s: float,
                agent_known: bool, starts: bool = False, check: RunCheck | None = None) -> Routed:
    """Route ``req`` (an ingress request, or an :class:`Inbound` made by Threadline) inside one
    transaction: claim its event id (a duplicate is answered as before and does nothing else),
    then route it on the locked thread. ``starts``: a wake schedules step 0 itself
    (:func:`route_claimed`).

    Returns:
        :class:`Routed` with the outbox ids to publish after commit.
    """
    inbound = req if isinstance(req, Inbound) else Inbound.of(req)
    reply_topic = inbound.reply_to or topics.replies
    signal, refusal = _precheck(inbound, agent_known)
    async with conn.transaction():
        arrival = await arrive(conn, inbound.event_id, inbound.resource_id, inbound.thread_id,
                               thread=dict(inbound.thread) if inbound.thread else None, open_thread=refusal is None)
        if not arrival.claimed:
            # a redelivery or a resent request: answer as before, do nothing else
            routed = Routed(duplicate=True)
            previous = await remembered(conn, "ingress", inbound.event_id)
            if previous:
                reply = REPLY_ADAPTER.validate_python(previous)
                routed.outbox_ids.append(await outbox.add(conn, reply_topic, reply, key=inbound.event_id))
                routed.reply = reply
            return routed
        routed = await route_claimed(conn, inbound, arrival, signal, refusal, topics=topics, lease_ttl_s=lease_ttl_s,
                                     starts=starts, check=check)
        await pause_point("ingress_route_before_commit")  # fault injection: the transaction open, lease row locked
        return routed


async def route_claimed(conn: asyncpg.Connection, req: Inbound, arrival: Arrival, signal: dict[str, Any] | None,
                        refusal: RequestRejected | InvalidEventError | None, *, topics: Topics, lease_ttl_s: float,
                        starts: bool = False, check: RunCheck | None = None) -> Routed:
    """Route ``req`` whose arrival the caller made (:func:`~threadline.store.arrival.arrive`:
    event id claimed, thread row, lease row locked) in the caller's transaction, ``signal`` its
    signal or ``refusal`` what :func:`_precheck` refused: refusals (unknown agent, thread of
    another resource, bad signal, a taken signal id) are answered with an error reply.

    A wake creates the run and queues ``accepted`` and a ``StartRun`` for the orchestrator; with
    ``starts``, when the orchestrator's rule (:func:`~threadline.orchestration.runs.on_start_run`)
    schedules step 0, its step task is queued here too (step-tasks) and the ``StartRun`` says
    ``scheduled`` (the orchestrator announces the start only). ``check`` validates a request that
    starts a run (a wake, or a turn queued as a run of its own): a :class:`ConfigurationError` it
    raises is answered ``invalid_request_context`` and nothing is stored."""
    reply_topic = req.reply_to or topics.replies
    routed = Routed()
    early = await _refused(conn, req, arrival, signal, refusal)
    if early is not None:
        return await _answer(conn, req, routed, reply_topic, early)
    assert signal is not None and arrival.lease is not None  # _refused: _precheck made it, the thread is ours
    lease = arrival.lease
    holder = await run_holder(conn, lease.run_id) if lease.active else None
    route_ = decide_route(req, ThreadState(active=lease.active, run_id=lease.run_id,
                                           run_agent_id=holder["agent_id"] if holder else None,
                                           run_ended=holder is not None and holder["status"] != "running"))
    if check is not None and isinstance(route_, Wake | Queue):  # a run starts with this request's context
        try:
            check(req)
        except ConfigurationError as exc:
            return await _answer(conn, req, routed, reply_topic,
                                 ErrorReply(request_id=req.event_id, code="invalid_request_context", message=str(exc)))
    if route_.attributes:
        signal["attributes"] = {**signal["attributes"], **route_.attributes}
    if req.kind not in ("stream", "generate"):  # a thread verb's signal (Mastra's CreatedAgentSignal)
        signal["acceptedAt"] = now_iso()
    signal_options: dict[str, Any] = {"reply_to": req.reply_to, "kind": req.kind}
    if not isinstance(route_, Wake):
        return await _answer(conn, req, routed, reply_topic,
                             *await _store_signal(conn, req, route_, signal, signal_options, routed, topics))
    # wake: the lease row is locked, so store_wake gives the run its next epoch
    routed.reply = await _wake(conn, req, lease, signal, signal_options, routed, topics=topics,
                               lease_ttl_s=lease_ttl_s, starts=starts)
    return routed


async def _answer(conn: asyncpg.Connection, req: Inbound, routed: Routed, reply_topic: str,
                  *replies: Event) -> Routed:
    """Queue ``replies`` (at least one) to ``reply_topic`` and remember the first as the answer to
    the request's event id; ``routed`` gets their outbox ids and the first as its reply."""
    for r in replies:
        routed.outbox_ids.append(await outbox.add(conn, reply_topic, r, key=req.event_id))
    routed.reply = replies[0]
    await remember(conn, "ingress", req.event_id, replies[0])
    return routed


async def _refused(conn: asyncpg.Connection, req: Inbound, arrival: Arrival, signal: dict[str, Any] | None,
                   refusal: RequestRejected | InvalidEventError | None) -> ErrorReply | Skipped | None:
    """The reply to a request routed no further: an :class:`ErrorReply` for a refusal (``refusal``,
    a taken signal id, a thread of another resource, a bad state signal), :class:`Skipped` for a
    state signal whose lane has this value already (:func:`_state_lane`); ``None`` to route it."""
    try:
        if refusal is not None:
            raise refusal
        if req.signal_id is not None and await signal_exists(conn, req.signal_id):
            raise RequestRejected("signal_id_taken", f"a signal with the id {req.signal_id!r} exists already")
        if arrival.lease is None:
            raise other_resource(req.thread_id)
        assert signal is not None  # no refusal: _precheck made it
        if req.state is not None and isinstance(await _state_lane(conn, req, signal), Skip):
            return Skipped(request_id=req.event_id)
    except (RequestRejected, InvalidEventError) as exc:
        message = exc.message if isinstance(exc, RequestRejected) else str(exc)
        return ErrorReply(request_id=req.event_id, code=exc.code, message=message)
    return None


async def _store_signal(conn: asyncpg.Connection, req: Inbound, route_: Discard | Persist | Deliver | Queue,
                        signal: dict[str, Any], signal_options: dict[str, Any], routed: Routed,
                        topics: Topics) -> list[Event]:
    """Store the signal of a route that starts no run (with its transcript message and, on an
    idle thread, the chunks of a run with no model call for a ``persist``); the replies to send."""
    async def store(mode: str, status: str, run_id: str | None, options: dict[str, Any] | None = None) -> None:
        await insert_signal(conn, signal, thread_id=req.thread_id, resource_id=req.resource_id,
                            agent_id=req.agent_id, request_id=req.event_id, mode=mode, status=status,
                            run_id=run_id, options={**(options or {}), **signal_options})

    if isinstance(route_, Discard):
        await store("discard", "discarded", None)
        return [Accepted(request_id=req.event_id, action="discard", signal_id=signal["id"], signal=_created(signal))]
    if isinstance(route_, Persist):
        await store("persist", "persisted", None)
        if route_.run_id is not None:  # the active run's input first: the thread is ordered by creation
            await store_run_input(conn, route_.run_id, thread_id=req.thread_id, resource_id=req.resource_id)
        await insert_signal_message(conn, signal, thread_id=req.thread_id, resource_id=req.resource_id)
        if route_.idle:  # subscribers see it as a run with no model call
            routed.chunk_topic = topics.chunks(req.resource_id, req.thread_id)
            key = thread_key(req.resource_id, req.thread_id)
            for chunk in synthetic_run_chunks(signal, agent_id=req.agent_id, run_id=new_id("run")):
                routed.outbox_ids.append(await outbox.add_raw(conn, routed.chunk_topic, orjson.dumps(chunk),
                                                              key=key, headers=chunk_headers()))
        return [Accepted(request_id=req.event_id, action="persist", signal_id=signal["id"], signal=_created(signal)),
                Persisted(request_id=req.event_id, signal_id=signal["id"])]
    if isinstance(route_, Deliver):
        await store("deliver", "pending", route_.run_id)
        return [Accepted(request_id=req.event_id, action="deliver", run_id=route_.run_id, signal_id=signal["id"],
                         signal=_created(signal))]
    queued_run = new_id("run")  # the run that will answer it, after the active one
    await store("queue", "pending", None, {**req.run_options, "run_id": queued_run})
    return [Accepted(request_id=req.event_id, action="deliver", run_id=queued_run, signal_id=signal["id"],
                     signal=_created(signal))]


async def _wake(conn: asyncpg.Connection, req: Inbound, lease: Lease, signal: Mapping[str, object],
                signal_options: Mapping[str, object], routed: Routed, *, topics: Topics, lease_ttl_s: float,
                starts: bool) -> Accepted:
    """Create the run a wake starts, with its ``accepted`` reply and its ``StartRun``; with
    ``starts``, step 0 scheduled here when :func:`~threadline.orchestration.runs.on_start_run`
    (the orchestrator's rule, asked on the run as this transaction creates it) schedules it: its
    step task queued and the ``StartRun`` marked ``scheduled``. Adds the outbox ids to ``routed``
    and returns the reply."""
    reply_topic = req.reply_to or topics.replies
    run_id = new_id("run")
    epoch = lease.next_epoch
    kind = "generate" if req.kind == "generate" else "stream"
    start = StartRun(run_id=run_id, resource_id=req.resource_id, thread_id=req.thread_id, epoch=epoch)
    created = RunRow.created(run_id=run_id, resource_id=req.resource_id, thread_id=req.thread_id,
                             agent_id=req.agent_id, epoch=epoch, kind=kind, request_id=req.event_id,
                             reply_to=reply_topic)
    move = on_start_run(created, start) if starts else None
    step0 = move if isinstance(move, ScheduleStep) else None
    reply = Accepted(request_id=req.event_id, action="wake", run_id=run_id, signal_id=signal["id"],
                     signal=_created(signal))
    key = thread_key(req.resource_id, req.thread_id)
    records: list[tuple[str, Event, str | None]] = [(reply_topic, reply, req.event_id)]
    if step0 is not None:
        records.append((topics.step_tasks, StepTask(run_id=run_id, resource_id=req.resource_id,
                                                    thread_id=req.thread_id, step=step0.step,
                                                    attempt=step0.attempt, epoch=epoch), key))
        start = start.model_copy(update={"scheduled": True})
    records.append((topics.run_commands, start, key))
    new_run = NewRun(run_id=run_id, agent_id=req.agent_id, kind=kind, request_id=req.event_id, reply_to=reply_topic,
                     options=req.run_options, start_announced=step0 is None)
    routed.outbox_ids += await store_wake(conn, lease, new_run, lease_ttl_s=lease_ttl_s, signal=signal,
                                          signal_options=signal_options, reply=reply, records=records)
    return reply


async def queue_signal(conn: asyncpg.Connection, req: Inbound, signal: dict[str, Any]) -> Accepted:
    """Store ``signal`` as the next turn of the (active) thread, like ``queue_message``, in the
    caller's transaction; the orchestrator starts its run once the active one ends. Answers
    the ``accepted`` reply naming that run."""
    queued_run = new_id("run")
    await insert_signal(conn, signal, thread_id=req.thread_id, resource_id=req.resource_id, agent_id=req.agent_id,
                        request_id=req.event_id, mode="queue", status="pending", run_id=None,
                        options={**req.run_options, "run_id": queued_run, "reply_to": req.reply_to,
                                 "kind": req.kind})
    return Accepted(request_id=req.event_id, action="deliver", run_id=queued_run, signal_id=signal["id"],
                    signal=_created(signal))


def _check_memory_options(options: object) -> None:
    """A call's ``memory_options`` (``memory.options`` of ``generate`` / ``stream``), refused here
    rather than failing the run later."""
    try:
        if not isinstance(options, dict):
            raise ConfigurationError("memory options must be an object")
        for_run(Memory(), options)
    except ConfigurationError as exc:
        raise RequestRejected("invalid_memory_options", str(exc)) from exc


def _created(signal: Mapping[str, object]) -> dict[str, Any]:
    """The ``accepted`` reply's view of the stored signal: all of it but ``contents`` (the request
    carries them; a message of several MB is not sent back)."""
    return {k: v for k, v in signal.items() if k != "contents"}


async def _state_lane(conn: asyncpg.Connection, req: Inbound, signal: dict[str, Any]) -> Skip | None:
    """Track the state lane: skip an unchanged value, else store its next version and stamp
    ``metadata.state`` on the signal."""
    st = req.state
    assert st is not None
    row = await lock_lane(conn, req.thread_id, st.id)
    lane = Lane(row["current_cache_key"], row["current_mode"], row["version"]) if row is not None else None
    decision = decide_state(st, thread_id=req.thread_id, lane=lane)
    if isinstance(decision, Skip):
        return decision
    signal["metadata"] = {**signal["metadata"], "state": decision.state}
    await save_lane(conn, req.thread_id, st.id, cache_key=st.cache_key, mode=st.mode, version=decision.version,
                    signal_id=signal["id"])
    return None


async def route_abort(conn: asyncpg.Connection, req: AbortRequest | ToolApprovalRequest, *,
                      topics: Topics) -> Routed:
    """Forward an ``abort`` request (or a ``tool_approval``: an approve or decline, decision 227)
    to the orchestrator, which owns run state and answers; a thread of another resource is
    refused here, as every write."""
    routed = Routed()
    reply_topic = req.reply_to or topics.replies
    async with conn.transaction():
        if not await claim_event(conn, "ingress", req.event_id):
            routed.duplicate = True
            return routed
        owner = await thread_owner(conn, req.thread_id)
        if owner is not None and owner != req.resource_id:
            reply: Event = ErrorReply(request_id=req.event_id, code="thread_owned_by_other_resource",
                                      message=f"thread {req.thread_id!r} belongs to another resource")
            routed.outbox_ids.append(await outbox.add(conn, reply_topic, reply, key=req.event_id))
            routed.reply = reply
            return routed
        cmd: Event
        if isinstance(req, ToolApprovalRequest):
            cmd = ResolveToolCall(resource_id=req.resource_id, thread_id=req.thread_id, run_id=req.run_id,
                                  tool_call_id=req.tool_call_id, approved=req.approved, reason=req.reason,
                                  request_id=req.event_id, reply_to=reply_topic)
        else:
            cmd = AbortRun(resource_id=req.resource_id, thread_id=req.thread_id, run_id=req.run_id,
                           request_id=req.event_id, reply_to=reply_topic)
        routed.outbox_ids.append(await outbox.add(conn, topics.run_commands, cmd,
                                                  key=thread_key(req.resource_id, req.thread_id)))
    return routed

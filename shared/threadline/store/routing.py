"""Ingress's routing decision, made atomically in Postgres (seed 004 ``sendMessage`` /
``queueMessage``; DECISIONS 12–13): with the thread's lease row locked, decide wake / deliver /
persist / discard, store the signal, create the run on a wake, and write the reply and the
orchestrator command to the outbox, all in one transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import asyncpg

from threadline.events import AbortRun, Accepted, ErrorReply, Persisted, Skipped, StartRun
from threadline.errors import InvalidEventError
from threadline.events.base import Event
from threadline.events.replies import REPLY_ADAPTER
from threadline.ids import new_id
from threadline.runtime.agent import normalize_options
import orjson

from threadline.runtime.signals import echo_chunk, signal_from_message, signal_to_message
from threadline.store import leases, outbox
from threadline.topics import Topics, thread_key


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


async def ensure_thread(conn: asyncpg.Connection, resource_id: str, thread_id: str,
                        thread: dict[str, Any] | None = None) -> None:
    """Create the thread row if missing; reject a thread owned by another resource (DECISIONS 16)."""
    title = (thread or {}).get("title")
    metadata = (thread or {}).get("metadata")
    owner = await conn.fetchval(
        "INSERT INTO threads (thread_id, resource_id, title, metadata) "
        "VALUES ($1, $2, $3, coalesce($4::jsonb, '{}'::jsonb)) "
        "ON CONFLICT (thread_id) DO UPDATE SET "
        "  title = coalesce(EXCLUDED.title, threads.title), "
        "  metadata = CASE WHEN $4::jsonb IS NULL THEN threads.metadata "
        "                  ELSE threads.metadata || $4::jsonb END, "
        "  updated_at = CASE WHEN $3 IS NULL AND $4::jsonb IS NULL THEN threads.updated_at ELSE now() END "
        "RETURNING resource_id", thread_id, resource_id, title, metadata)
    if owner != resource_id:
        raise RequestRejected("thread_owned_by_other_resource",
                              f"thread {thread_id!r} belongs to another resource")


async def _seen(conn: asyncpg.Connection, event_id: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(
        "INSERT INTO processed_events (consumer, event_id) VALUES ('ingress', $1) "
        "ON CONFLICT DO NOTHING RETURNING event_id", event_id)
    if row is not None:
        return None
    return await conn.fetchval(
        "SELECT result FROM processed_events WHERE consumer = 'ingress' AND event_id = $1", event_id) or {}


async def route(conn: asyncpg.Connection, req: Any, *, topics: Topics, lease_ttl_s: float,
                agent_known: bool) -> Routed:
    """Route ``req`` (SendMessage, QueueMessage, Stream or Generate) inside one transaction.

    Returns:
        :class:`Routed` with the outbox ids to publish after commit.
    Raises:
        RequestRejected: unknown agent, thread of another resource, bad message.
    """
    key = thread_key(req.resource_id, req.thread_id)
    reply_topic = req.reply_to or topics.replies
    routed = Routed()
    async with conn.transaction():
        previous = await _seen(conn, req.event_id)
        if previous is not None:  # a redelivery or a resent request: answer as before, do nothing else
            routed.duplicate = True
            if previous:
                reply = REPLY_ADAPTER.validate_python(previous)
                routed.outbox_ids.append(await outbox.add(conn, reply_topic, reply, key=req.event_id))
                routed.reply = reply
            return routed
        try:
            if not agent_known:
                raise RequestRejected("unknown_agent", f"no agent with id {req.agent_id!r}")
            signal = _signal_of(req)
            await ensure_thread(conn, req.resource_id, req.thread_id, getattr(req, "thread", None))
            if req.type == "send_state_signal":
                skipped = await _state_lane(conn, req, signal)
                if skipped is not None:
                    routed.outbox_ids.append(await outbox.add(conn, reply_topic, skipped, key=req.event_id))
                    routed.reply = skipped
                    await _remember(conn, req.event_id, skipped)
                    return routed
        except (RequestRejected, InvalidEventError) as exc:
            code = exc.code
            message = exc.message if isinstance(exc, RequestRejected) else str(exc)
            reply = ErrorReply(request_id=req.event_id, code=code, message=message)
            routed.outbox_ids.append(await outbox.add(conn, reply_topic, reply, key=req.event_id))
            routed.reply = reply
            await _remember(conn, req.event_id, reply)
            return routed
        lease = await leases.lock_thread(conn, req.resource_id, req.thread_id)
        kind = req.type
        targeted = kind in SIGNALLING
        if lease.active:
            active_agent = await conn.fetchval("SELECT agent_id FROM runs WHERE run_id = $1", lease.run_id)
            # an explicit run_id targets that run whatever its agent (seed: options.runId)
            same_agent = active_agent == req.agent_id or getattr(req, "run_id", None) == lease.run_id
            # another agent's run is never interrupted: the message waits for the thread (S8)
            behavior = req.if_active.behavior if targeted and same_agent else "queue"
            attributes = req.if_active.attributes if targeted else {}
        else:
            behavior = req.if_idle.behavior if targeted or kind == "queue_message" else "wake"
            if kind == "queue_message":
                behavior = "wake"  # queueMessage on an idle thread always starts a run (S22)
            attributes = req.if_idle.attributes if targeted or kind == "queue_message" else {}
        if attributes:
            signal["attributes"] = {**signal["attributes"], **attributes}
        options = _run_options(req)
        if behavior == "discard":
            reply: Event = Accepted(request_id=req.event_id, action="discard", signal_id=signal["id"])
            await _insert_signal(conn, req, signal, mode="discard", status="discarded", run_id=None)
        elif behavior == "persist":
            await _insert_signal(conn, req, signal, mode="persist", status="persisted", run_id=None)
            message = signal_to_message(signal, thread_id=req.thread_id, resource_id=req.resource_id)
            await conn.execute(
                "INSERT INTO messages (id, thread_id, resource_id, role, type, content) "
                "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
                message["id"], req.thread_id, req.resource_id, message["role"], message.get("type"),
                message["content"])
            reply = Accepted(request_id=req.event_id, action="persist", signal_id=signal["id"])
            persisted = Persisted(request_id=req.event_id, signal_id=signal["id"])
            if not lease.active:  # subscribers see it as a run with no model call (S5)
                routed.chunk_topic = topics.chunks(req.resource_id, req.thread_id)
                for chunk in persisted_run_chunks(signal, agent_id=req.agent_id):
                    routed.outbox_ids.append(await outbox.add_raw(conn, routed.chunk_topic, orjson.dumps(chunk),
                                                                  key=key, headers=[("tl-type", b"chunk")]))
            routed.outbox_ids.append(await outbox.add(conn, reply_topic, reply, key=req.event_id))
            routed.outbox_ids.append(await outbox.add(conn, reply_topic, persisted, key=req.event_id))
            await _remember(conn, req.event_id, reply)
            routed.reply = reply
            return routed
        elif behavior == "deliver":
            await _insert_signal(conn, req, signal, mode="deliver", status="pending", run_id=lease.run_id)
            reply = Accepted(request_id=req.event_id, action="deliver", run_id=lease.run_id,
                             signal_id=signal["id"])
        elif behavior == "queue":
            queued_run = new_id("run")  # the run that will answer it, after the active one (S21)
            await _insert_signal(conn, req, signal, mode="queue", status="pending", run_id=None,
                                 options={**options, "run_id": queued_run})
            reply = Accepted(request_id=req.event_id, action="deliver", run_id=queued_run,
                             signal_id=signal["id"])
        else:  # wake
            run_id = new_id("run")
            epoch = await leases.take(conn, lease, run_id, lease_ttl_s)
            await create_run(conn, run_id=run_id, agent_id=req.agent_id, resource_id=req.resource_id,
                             thread_id=req.thread_id, epoch=epoch, options=options,
                             kind="generate" if kind == "generate" else "stream",
                             request_id=req.event_id, reply_to=reply_topic)
            await _insert_signal(conn, req, signal, mode="wake", status="pending", run_id=run_id)
            reply = Accepted(request_id=req.event_id, action="wake", run_id=run_id, signal_id=signal["id"])
            start = StartRun(run_id=run_id, resource_id=req.resource_id, thread_id=req.thread_id,
                             epoch=epoch)
            routed.outbox_ids.append(await outbox.add(conn, reply_topic, reply, key=req.event_id))
            routed.outbox_ids.append(await outbox.add(conn, topics.run_commands, start, key=key))
            await _remember(conn, req.event_id, reply)
            routed.reply = reply
            return routed
        routed.outbox_ids.append(await outbox.add(conn, reply_topic, reply, key=req.event_id))
        await _remember(conn, req.event_id, reply)
        routed.reply = reply
        return routed


SIGNALLING = ("send_message", "send_signal", "send_state_signal")
"""Requests with ``if_active`` / ``if_idle`` behaviours (deliver into an active run)."""


def _signal_of(req: Any) -> dict[str, Any]:
    """The signal a request carries (seed 004: messages are ``user`` signals)."""
    if req.type == "send_signal":
        sig = req.signal
        return signal_from_message({"contents": sig.contents, "attributes": sig.attributes,
                                    "metadata": sig.metadata, "provider_options": sig.provider_options},
                                   kind=sig.type, tag_name=sig.tag_name)
    if req.type == "send_state_signal":
        st = req.state
        return signal_from_message({"contents": st.contents, "attributes": st.attributes, "metadata": st.metadata},
                                   kind="state", tag_name=st.tag_name)
    return signal_from_message(req.message)


async def _state_lane(conn: asyncpg.Connection, req: Any, signal: dict[str, Any]) -> Event | None:
    """Track the lane (seed ``sendStateSignal``): skip an unchanged value, else bump its version
    and stamp ``metadata.state`` on the signal. Returns the ``skipped`` reply or ``None``."""
    st = req.state
    lane = await conn.fetchrow("SELECT * FROM state_lanes WHERE thread_id = $1 AND lane_id = $2 FOR UPDATE",
                               req.thread_id, st.id)
    if lane is not None and lane["current_cache_key"] == st.cache_key and lane["current_mode"] == st.mode:
        return Skipped(request_id=req.event_id)
    version = (lane["version"] if lane else 0) + 1
    state_meta: dict[str, Any] = {"id": st.id, "threadId": req.thread_id, "cacheKey": st.cache_key,
                                  "version": version, "mode": st.mode}
    if st.mode == "snapshot" and st.value is not None:
        state_meta["value"] = st.value
    if st.mode == "delta" and st.delta is not None:
        state_meta["delta"] = st.delta
    signal["metadata"] = {**signal["metadata"], "state": state_meta}
    await conn.execute(
        "INSERT INTO state_lanes (thread_id, lane_id, current_cache_key, current_mode, version, last_signal_id, "
        "last_snapshot_signal_id) VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $4 = 'snapshot' THEN $6 END) "
        "ON CONFLICT (thread_id, lane_id) DO UPDATE SET current_cache_key = EXCLUDED.current_cache_key, "
        "current_mode = EXCLUDED.current_mode, version = EXCLUDED.version, last_signal_id = EXCLUDED.last_signal_id, "
        "last_snapshot_signal_id = CASE WHEN EXCLUDED.current_mode = 'snapshot' THEN EXCLUDED.last_signal_id "
        "ELSE state_lanes.last_snapshot_signal_id END, updated_at = now()",
        req.thread_id, st.id, st.cache_key, st.mode, version, signal["id"])
    return None


def persisted_run_chunks(signal: dict[str, Any], *, agent_id: str) -> list[dict[str, Any]]:
    """``start``, the signal's echo and ``finish`` of a run that made no model call (Mastra's
    synthetic run for an idle ``persist``); it has its own run id."""
    run_id = new_id("run")
    base = {"runId": run_id, "step": 0, "attempt": 1, "from": "AGENT"}
    return [{**base, "seq": 0, "type": "start", "payload": {"id": agent_id, "messageId": signal["id"]}},
            {**base, "seq": 1, **echo_chunk(signal)},
            {**base, "seq": 2, "type": "finish", "payload": {
                "stepResult": {"reason": "stop"}, "finishReason": "stop",
                "output": {"usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}}}}]


def _run_options(req: Any) -> dict[str, Any]:
    if req.type in ("queue_message", *SIGNALLING):
        return normalize_options(req.if_idle.stream_options)
    return normalize_options(req.options)


async def _remember(conn: asyncpg.Connection, event_id: str, reply: Event) -> None:
    await conn.execute("UPDATE processed_events SET result = $2 WHERE consumer = 'ingress' AND event_id = $1",
                       event_id, reply.dump())


async def _insert_signal(conn: asyncpg.Connection, req: Any, signal: dict[str, Any], *, mode: str,
                         status: str, run_id: str | None, options: dict[str, Any] | None = None) -> None:
    await conn.execute(
        "INSERT INTO signals (id, thread_id, resource_id, agent_id, type, mode, status, run_id, "
        "request_id, payload, options) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        signal["id"], req.thread_id, req.resource_id, req.agent_id, signal["type"], mode, status, run_id,
        req.event_id, signal, {**(options or {}), "reply_to": req.reply_to, "kind": req.type})


async def create_run(conn: asyncpg.Connection, *, run_id: str, agent_id: str, resource_id: str,
                     thread_id: str, epoch: int, options: dict[str, Any], kind: str,
                     request_id: str | None, reply_to: str | None) -> None:
    """Insert a ``running`` run row."""
    await conn.execute(
        "INSERT INTO runs (run_id, thread_id, resource_id, agent_id, kind, request_id, reply_to, epoch, "
        "options) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        run_id, thread_id, resource_id, agent_id, kind, request_id, reply_to, epoch, options)


async def route_abort(conn: asyncpg.Connection, req: Any, *, topics: Topics) -> Routed:
    """Forward an ``abort`` request to the orchestrator (which owns run state and answers)."""
    routed = Routed()
    reply_topic = req.reply_to or topics.replies
    async with conn.transaction():
        if await _seen(conn, req.event_id) is not None:
            routed.duplicate = True
            return routed
        owner = await conn.fetchval("SELECT resource_id FROM threads WHERE thread_id = $1", req.thread_id)
        if owner is not None and owner != req.resource_id:
            reply: Event = ErrorReply(request_id=req.event_id, code="thread_owned_by_other_resource",
                                      message=f"thread {req.thread_id!r} belongs to another resource")
            routed.outbox_ids.append(await outbox.add(conn, reply_topic, reply, key=req.event_id))
            routed.reply = reply
            return routed
        cmd = AbortRun(resource_id=req.resource_id, thread_id=req.thread_id, run_id=req.run_id,
                       request_id=req.event_id, reply_to=reply_topic)
        routed.outbox_ids.append(await outbox.add(conn, topics.run_commands, cmd,
                                                  key=thread_key(req.resource_id, req.thread_id)))
    return routed

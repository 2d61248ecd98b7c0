"""The notification inbox's use cases: receiving notifications (ingress) and delivering due
records (notification-scheduler); the rows are :mod:`threadline.store.notifications`. Signals go
out through the same routing as ``send_signal``, inside the caller's transaction, so a record is
marked delivered exactly when its signal is.

Lock order, everywhere: the thread's lease row, then its notification rows — the same order as
ingress — so schedulers and ingress never deadlock; a scheduler works one thread per transaction.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import asyncpg

from threadline._internal.faults import pause_point
from threadline.events import Accepted, LifecycleEvent, Notified, SignalInput
from threadline.events.base import Event
from threadline.events.signals import signal_from_message
from threadline.flows.routing import RequestRejected, Routed, other_resource, queue_signal, route
from threadline.ids import new_id
from threadline.inbox.policy import MAX_DELIVERY_ATTEMPTS, PRIORITY_RANK, Decision, decide, retry_delay_s
from threadline.inbox.render import combined_notification_signal, digest_signal, notification_signal
from threadline.logging import get_logger
from threadline.orchestration.options import normalize_options
from threadline.orchestration.routing import Inbound
from threadline.store import leases, outbox
from threadline.store import notifications as notes
from threadline.store.arrival import arrive
from threadline.topics import Topics, thread_key

log = get_logger(__name__)
__all__ = ["MAX_DELIVERY_ATTEMPTS", "dispatch_due", "receive", "record_view", "redecide_held"]
_COLUMNS = ("id", "thread_id", "resource_id", "agent_id", "source", "kind", "priority", "status", "summary",
            "payload", "dedupe_key", "coalesce_key", "coalesced_count", "attributes", "metadata", "deliver_at",
            "summary_at", "summarized", "held", "delivery_reason", "delivery_attempts", "last_delivery_error",
            "delivered_signal_id", "summary_signal_id", "created_at", "updated_at", "delivered_at", "seen_at",
            "dismissed_at", "archived_at", "discarded_at")
_THREADLINE_ONLY = frozenset({"summarized", "held"})
"""Inbox flags Mastra's ``NotificationRecord`` has no field for: in a result's record only when true."""


def record_view(row: asyncpg.Record | dict[str, Any]) -> dict[str, Any]:
    """A record as JSON (what replies, the client, the CLI and tools see): every column, times as
    ISO 8601."""
    keys = set(row.keys())
    out = {k: row[k] for k in _COLUMNS if k in keys}
    for k, v in list(out.items()):
        if isinstance(v, datetime):
            out[k] = v.isoformat()
    return out


def result_record(row: asyncpg.Record | dict[str, Any]) -> dict[str, Any]:
    """A ``sendNotificationSignal`` result's record, as Mastra's ``NotificationRecord``: the fields
    :func:`record_view` gives that hold a value (no ``None``, no empty ``attributes`` /
    ``metadata``); Threadline's own flags ``summarized`` / ``held`` only when true (a summary
    went out; the policy's ``hold``, which Mastra has not)."""
    return {k: v for k, v in record_view(row).items()
            if v is not None and v != {} and not (k in _THREADLINE_ONLY and v is False)}


def _waits_for_idle(r: asyncpg.Record) -> bool:
    """Records that never enter an active run: low ones (Threadline's N7 decision) and high ones
    whose summary already reached the run (delivered in full when the thread goes idle,
    docs/decisions.md §11); the same rule as ``store/notifications.py``'s ``_WAITS_FOR_IDLE``."""
    return r["priority"] == "low" or (r["summarized"] and r["summary_at"] is None)


async def _send(conn: asyncpg.Connection, row: asyncpg.Record, signal: Mapping[str, object], *, topics: Topics,
                lease_ttl_s: float, wake: bool, stream_options: Mapping[str, object], event_id: str,
                reply_to: str | None) -> Routed:
    """Route ``signal`` like ``send_signal``: into the active run, else wake (or persist) the thread."""
    req = _inbound(row, signal, event_id=event_id, reply_to=reply_to, wake=wake, stream_options=stream_options)
    return await route(conn, req, topics=topics, lease_ttl_s=lease_ttl_s, agent_known=True)


def _inbound(row: asyncpg.Record, signal: Mapping[str, object], *, event_id: str, reply_to: str | None, wake: bool,
             stream_options: Mapping[str, object]) -> Inbound:
    return Inbound.signal(SignalInput.model_validate(signal), event_id=event_id, agent_id=row["agent_id"],
                          resource_id=row["resource_id"], thread_id=row["thread_id"], reply_to=reply_to,
                          if_idle="wake" if wake else "persist", stream_options=stream_options)


async def _queue(conn: asyncpg.Connection, row: asyncpg.Record, signal: dict[str, Any], *, topics: Topics,
                 lease_ttl_s: float, stream_options: dict[str, Any], event_id: str, reply_to: str | None) -> Routed:
    """The ``queue`` action: the next turn after the active run, like ``queueMessage``; on an
    idle thread it wakes a run at once."""
    lease = await leases.lock_thread(conn, row["resource_id"], row["thread_id"])
    if not lease.active:
        return await _send(conn, row, signal, topics=topics, lease_ttl_s=lease_ttl_s, wake=True,
                           stream_options=stream_options, event_id=event_id, reply_to=reply_to)
    sig = signal_from_message({k: signal[k] for k in ("contents", "attributes", "metadata")}, kind="notification",
                              tag_name=signal.get("tag_name"))
    req = Inbound(event_id=event_id, kind="queue_message", agent_id=row["agent_id"], resource_id=row["resource_id"],
                  thread_id=row["thread_id"], reply_to=reply_to, run_options=normalize_options(stream_options))
    return Routed(reply=await queue_signal(conn, req, sig))


async def receive(conn: asyncpg.Connection, req: Any, *, policy: dict[str, Any], topics: Topics,
                  lease_ttl_s: float, digest_window_s: float, agent_known: bool) -> tuple[list[int], Event]:
    """``sendNotificationSignal``: store/merge records, decide each, act on what is due now.

    Returns:
        (outbox ids to flush after commit, the ``notified`` reply).
    Raises:
        RequestRejected: unknown agent, thread of another resource.
    """
    ids: list[int] = []
    reply_topic = req.reply_to or topics.replies
    async with conn.transaction():
        arrival = await arrive(conn, req.event_id, req.resource_id, req.thread_id, open_thread=agent_known)
        if not arrival.claimed:
            return ids, Notified(request_id=req.event_id, results=[])
        if not agent_known:
            raise RequestRejected("unknown_agent", f"no agent with id {req.agent_id!r}")
        if arrival.lease is None:
            raise other_resource(req.thread_id)
        lease = arrival.lease
        now = datetime.now(UTC)
        results = []
        for i, n in enumerate(req.notifications):
            row = await notes.upsert(conn, thread_id=req.thread_id, resource_id=req.resource_id,
                                     agent_id=req.agent_id, n=n)
            decision = await decide(policy, dict(row), active=lease.active, now=now, digest_window_s=digest_window_s)
            row, sent = await _act(conn, row, decision, now=now, topics=topics, lease_ttl_s=lease_ttl_s,
                                   stream_options=req.if_idle.stream_options, event_id=f"{req.event_id}:{i}",
                                   reply_to=reply_topic, ids=ids)
            results.append({"record": result_record(row), "decision": decision.dump(), **sent})
        reply = Notified(request_id=req.event_id, results=results)
        ids.append(await outbox.add(conn, reply_topic, reply, key=req.event_id))
    return ids, reply


async def _act(conn: asyncpg.Connection, row: asyncpg.Record, d: Decision, *, now: datetime, topics: Topics,
               lease_ttl_s: float, stream_options: dict[str, Any], event_id: str, reply_to: str | None,
               ids: list[int]) -> tuple[asyncpg.Record, dict[str, Any]]:
    """Apply decision ``d`` to the (locked) record: store its schedule, send what is due now."""
    rid = row["id"]
    if d.action == "discard":
        row = await notes.discard(conn, rid, d.reason)
        return row, {}
    if d.action in ("persist", "hold"):  # inbox only; a held record is re-decided when the thread goes idle
        row = await notes.keep(conn, rid, d.reason, held=d.action == "hold")
        return row, {}
    if d.action in ("defer", "summarize"):
        # a record whose summary already went out is not summarised again (C19: one summary for n3+n4)
        summary_at = None if row["summarized"] else d.summary_at
        row = await notes.schedule(conn, rid, deliver_at=d.deliver_at, summary_at=summary_at, reason=d.reason)
        immediate = (d.action == "summarize" and summary_at is not None and summary_at <= now
                     and (row["priority"] == "medium" or (row["priority"] == "high" and row["deliver_at"] is not None)))
        if not immediate:
            return row, {}
        # mastra §3.9: a medium (or high, with a later full delivery) summary due now goes out now
        pending = await notes.pending_count(conn, row["thread_id"])
        digest = digest_signal([dict(row)], pending=pending)
        routed = await _send(conn, row, digest, topics=topics,
                             lease_ttl_s=lease_ttl_s, wake=row["priority"] != "high", stream_options=stream_options,
                             event_id=event_id, reply_to=reply_to)
        ids.extend(routed.outbox_ids)
        if _outcome(routed) == "rejected":
            await _failed(conn, [row], _rejection(routed), now, column="summary_at")
            return await notes.read(conn, rid), {}
        sig = routed.reply.signal_id  # type: ignore[union-attr]  # routing accepted: the reply is Accepted
        ids.append(await _announce(conn, topics, row, "summary_delivered", [rid], sig,
                                   getattr(routed.reply, "run_id", None)))
        row = (await notes.mark_summarized(conn, [rid], sig))[0]
        return row, _sent(routed, digest)
    # deliver (into the active run, or waking the thread) / queue (the next turn)
    send = _queue if d.action == "queue" else _send_wake
    signal = notification_signal(dict(row))
    routed = await send(conn, row, signal, topics=topics, lease_ttl_s=lease_ttl_s,
                        stream_options=stream_options, event_id=event_id, reply_to=reply_to)
    ids.extend(routed.outbox_ids)
    outcome = _outcome(routed)
    if outcome == "delivered":
        row = (await _mark_delivered(conn, [row], routed, d.reason, topics, ids))[0]
    elif outcome == "rejected":
        await _failed(conn, [row], _rejection(routed), now, column="deliver_at")
        row = await notes.read(conn, rid)
    return row, _sent(routed, signal)


async def _send_wake(conn: asyncpg.Connection, row: asyncpg.Record, signal: dict[str, Any], **kw: Any) -> Routed:
    return await _send(conn, row, signal, wake=True, **kw)


def _outcome(routed: Routed) -> str:
    """``delivered`` (a run has it), ``skipped`` (accepted as persist/discard), ``rejected``."""
    reply = routed.reply
    if not isinstance(reply, Accepted):
        return "rejected"
    return "delivered" if reply.action in ("wake", "deliver") else "skipped"


def _rejection(routed: Routed) -> str:
    reply = routed.reply
    if reply is None:
        return "no reply from routing"
    return f"{getattr(reply, 'code', getattr(reply, 'type', '?'))}: {getattr(reply, 'message', '')}"


def _sent(routed: Routed, signal: Mapping[str, Any]) -> dict[str, Any]:
    """What a result says of the signal that went out (Mastra's ``{signal, accepted, runId?,
    persisted?}``): ``signal`` the created signal with its ``contents`` (its ``id`` the stored
    signal's), ``run_id`` the run that took it, ``persisted`` ``{signal_id}`` when it
    was stored on the idle thread (durable once this reply is out: the reply is sent after commit)."""
    reply = routed.reply
    if not isinstance(reply, Accepted):
        return {}
    out: dict[str, Any] = {"signal": {**(reply.signal or {}), "contents": signal.get("contents", "")},
                           "accepted": {"action": reply.action, "run_id": reply.run_id}}
    if reply.run_id is not None:
        out["run_id"] = reply.run_id
    if reply.action == "persist":
        out["persisted"] = {"signal_id": reply.signal_id}
    return out


async def _announce(conn: asyncpg.Connection, topics: Topics, row: asyncpg.Record, kind: str,
                    record_ids: list[str], signal_id: str | None, run_id: str | None) -> int:
    event = LifecycleEvent(type=kind, resource_id=row["resource_id"], thread_id=row["thread_id"],
                           agent_id=row["agent_id"], run_id=run_id, notification_ids=record_ids, signal_id=signal_id)
    return await outbox.add(conn, topics.lifecycle, event, key=thread_key(row["resource_id"], row["thread_id"]))


async def _mark_delivered(conn: asyncpg.Connection, rows: list[asyncpg.Record], routed: Routed, reason: str | None,
                          topics: Topics, ids: list[int]) -> list[asyncpg.Record]:
    reply = routed.reply
    rids = [r["id"] for r in rows]
    ids.append(await _announce(conn, topics, rows[0], "notification_delivered", rids, reply.signal_id,  # type: ignore[union-attr]  # routing accepted: the reply is Accepted
                               reply.run_id))  # type: ignore[union-attr]  # routing accepted: the reply is Accepted
    return await notes.mark_delivered(conn, rids, reply.signal_id, reason)  # type: ignore[union-attr]  # routing accepted: the reply is Accepted


async def _failed(conn: asyncpg.Connection, rows: list[asyncpg.Record], error: str, now: datetime, *,
                  column: Literal["deliver_at", "summary_at"]) -> None:
    """Failure bookkeeping: attempts + 1, the error, a retry after a backoff (``column`` is the
    schedule to move); ``failed`` after :data:`MAX_DELIVERY_ATTEMPTS`."""
    for r in rows:
        attempts = r["delivery_attempts"] + 1
        retry_at = now + timedelta(seconds=retry_delay_s(attempts))
        await notes.record_failure(conn, r["id"], attempts=attempts, error=error[:500], now=now, retry_at=retry_at,
                                   max_attempts=MAX_DELIVERY_ATTEMPTS, column=column)
        log.warning("notification delivery failed", record_id=r["id"], thread_id=r["thread_id"], attempts=attempts,
                    error=error[:200])


def _items(recs: list[asyncpg.Record]) -> list[list[asyncpg.Record]]:
    """Individual deliveries: records sharing a ``coalesce_key`` (and source) go together
    (docs/decisions.md §9), each group oldest first (records due at once may come in any order;
    records stored by one request share a ``created_at`` and are ordered by their ids, which
    :func:`threadline.ids.new_id` makes increasing); groups by priority, then age."""
    groups: dict[Any, list[asyncpg.Record]] = {}
    for r in recs:
        key = (r["source"], r["coalesce_key"]) if r["coalesce_key"] else r["id"]
        groups.setdefault(key, []).append(r)
    ordered = [sorted(g, key=_age) for g in groups.values()]
    return sorted(ordered, key=lambda g: (min(PRIORITY_RANK[r["priority"]] for r in g), _age(g[0])))


def _age(r: asyncpg.Record) -> tuple[datetime, str]:
    return r["created_at"], r["id"]


async def dispatch_due(conn: asyncpg.Connection, *, topics: Topics, lease_ttl_s: float, now: datetime,
                       thread_id: str | None = None, limit: int = 100) -> tuple[list[int], set[tuple[str, str]]]:
    """Deliver what is due at ``now`` (the scheduler's clock): ``deliver_at`` / ``summary_at`` reached.

    Per thread, in one transaction holding the thread's lease row: individual records by priority
    (a ``coalesce_key`` group as one notification), then one digest of the summary-due ones. While
    the thread is active, low records and high records already summarised wait for idle (the
    scheduler is told by ``thread_idle``); an all-low digest never wakes the model (subscribers
    only). Several schedulers may run this at once: a thread whose lease row another holds is
    skipped this pass, and records are re-read under the lock, so none is delivered twice.

    Returns:
        (outbox ids to flush, the (resource, thread) pairs that may get chunks).
    """
    ids: list[int] = []
    touched: set[tuple[str, str]] = set()
    # each pass takes the threads in its own random order, so schedulers running at once share the
    # work (a thread another holds is skipped) instead of queueing behind one another's locks
    order = await notes.due_threads(conn, now=now, thread_id=thread_id, limit=limit)
    random.shuffle(order)
    for resource_id, tid in order:
        try:
            await _dispatch_thread(conn, resource_id, tid, now=now, topics=topics, lease_ttl_s=lease_ttl_s, ids=ids,
                                   touched=touched)
        except Exception:
            log.exception("inbox dispatch failed", thread_id=tid, resource_id=resource_id)
    return ids, touched


async def _dispatch_thread(conn: asyncpg.Connection, resource_id: str, tid: str, *, now: datetime, topics: Topics,
                           lease_ttl_s: float, ids: list[int], touched: set[tuple[str, str]]) -> None:
    sent: list[int] = []
    async with conn.transaction():
        if await leases.held_elsewhere(conn, tid):
            return  # another scheduler (or a run's transition) holds the thread now: the next pass gets it
        lease = await leases.lock_thread(conn, resource_id, tid)
        recs = await notes.claim_due(conn, tid, now)
        if not recs:
            return
        await pause_point("scheduler_after_claim")  # fault injection: records claimed, nothing routed yet
        touched.add((resource_id, tid))
        summary_due = [r for r in recs if r["summary_at"] is not None and r["summary_at"] <= now]
        summarising = {r["id"] for r in summary_due}
        individual = [r for r in recs if r["id"] not in summarising]
        for group in _items(individual):
            if lease.active and any(_waits_for_idle(r) for r in group):
                continue  # delivered when the thread goes idle
            await _deliver_group(conn, group, now=now, topics=topics, lease_ttl_s=lease_ttl_s, ids=sent)
            lease = await leases.lock_thread(conn, resource_id, tid)
        batch = [r for r in summary_due if not (lease.active and r["priority"] == "low")]
        if batch:
            await _digest(conn, batch, now=now, topics=topics, lease_ttl_s=lease_ttl_s, ids=sent)
    ids.extend(sent)  # only once the thread's transaction committed


async def _deliver_group(conn: asyncpg.Connection, group: list[asyncpg.Record], *, now: datetime, topics: Topics,
                         lease_ttl_s: float, ids: list[int]) -> None:
    first = group[0]
    try:
        async with conn.transaction():  # a savepoint: a failure undoes this delivery only
            routed = await _send(conn, first, combined_notification_signal([dict(r) for r in group]), topics=topics,
                                 lease_ttl_s=lease_ttl_s, wake=True, stream_options={},
                                 event_id=f"deliver:{first['id']}:{first['delivery_attempts']}", reply_to=None)
            outcome = _outcome(routed)
            await pause_point("scheduler_after_route_before_mark")  # fault injection: routed, not marked
            if outcome == "delivered":
                sent: list[int] = list(routed.outbox_ids)
                await _mark_delivered(conn, group, routed, first["delivery_reason"] or "scheduled", topics, sent)
                ids.extend(sent)
                return
    except Exception as exc:  # noqa: BLE001 - retried with backoff by a later tick
        await _failed(conn, group, f"{type(exc).__name__}: {exc}", now, column="deliver_at")
        return
    if outcome == "rejected":
        ids.extend(routed.outbox_ids)  # the error reply
        await _failed(conn, group, _rejection(routed), now, column="deliver_at")


async def _digest(conn: asyncpg.Connection, batch: list[asyncpg.Record], *, now: datetime, topics: Topics,
                  lease_ttl_s: float, ids: list[int]) -> None:
    """One ``notification-summary`` for the batch; the records stay pending (docs/decisions.md §11)."""
    first = batch[0]
    pending = await notes.pending_count(conn, first["thread_id"])
    all_low = all(r["priority"] == "low" for r in batch)
    try:
        async with conn.transaction():
            routed = await _send(conn, first, digest_signal([dict(r) for r in batch], pending=pending), topics=topics,
                                 lease_ttl_s=lease_ttl_s, wake=not all_low, stream_options={},
                                 event_id=f"digest:{first['id']}:{new_id()}", reply_to=None)
    except Exception as exc:  # noqa: BLE001 - a failed delivery is recorded and retried, never fatal
        await _failed(conn, batch, f"{type(exc).__name__}: {exc}", now, column="summary_at")
        return
    await pause_point("scheduler_after_route_before_mark")  # fault injection: routed, not marked
    ids.extend(routed.outbox_ids)
    if _outcome(routed) == "rejected":
        await _failed(conn, batch, _rejection(routed), now, column="summary_at")
        return
    sig = routed.reply.signal_id  # type: ignore[union-attr]  # routing accepted: the reply is Accepted
    ids.append(await _announce(conn, topics, first, "summary_delivered", [r["id"] for r in batch], sig,
                               getattr(routed.reply, "run_id", None)))
    await notes.mark_summarized(conn, [r["id"] for r in batch], sig)


async def redecide_held(conn: asyncpg.Connection, *, resource_id: str, thread_id: str,
                        policy_of: Callable[[str], dict[str, Any] | None], now: datetime, topics: Topics,
                        lease_ttl_s: float, digest_window_s: float) -> list[int]:
    """``hold`` (docs/decisions.md §10): the thread went idle, so ask the agent's policy again about every
    held record of the thread and act on the new decision (which may be ``hold`` again).

    Args:
        policy_of: agent id → that agent's delivery policy (``None``: the default table).
    Returns:
        Outbox ids to flush.
    """
    ids: list[int] = []
    async with conn.transaction():
        lease = await leases.lock_thread(conn, resource_id, thread_id)
        held = await notes.claim_held(conn, thread_id)
        for row in held:
            decision = await decide(policy_of(row["agent_id"]), dict(row), active=lease.active, now=now,
                                    digest_window_s=digest_window_s)
            await _act(conn, row, decision, now=now, topics=topics, lease_ttl_s=lease_ttl_s, stream_options={},
                       event_id=f"held:{row['id']}:{new_id()}", reply_to=None, ids=ids)
            lease = await leases.lock_thread(conn, resource_id, thread_id)
    return ids

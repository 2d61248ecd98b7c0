"""The notification inbox in Postgres: receiving notifications (ingress) and delivering due
records (notification-scheduler). Signals go out through the same routing as ``send_signal``,
inside the caller's transaction, so a record is marked delivered exactly when its signal is."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg

from threadline.events import LifecycleEvent, Notified, SendSignal
from threadline.events.base import Event
from threadline.ids import new_id
from threadline.inbox.policy import PRIORITY_RANK, Decision, decide
from threadline.inbox.render import digest_signal, notification_signal
from threadline.logging import get_logger
from threadline.store import leases, outbox
from threadline.store.routing import Routed, ensure_thread, route
from threadline.topics import Topics, thread_key

log = get_logger(__name__)
MAX_DELIVERY_ATTEMPTS = 5
_COLUMNS = ("id", "thread_id", "resource_id", "agent_id", "source", "kind", "priority", "status", "summary",
            "payload", "dedupe_key", "coalesce_key", "coalesced_count", "attributes", "metadata", "deliver_at",
            "summary_at", "summarized", "delivery_reason", "delivery_attempts", "last_delivery_error",
            "delivered_signal_id", "summary_signal_id", "created_at", "updated_at", "delivered_at")


def record_view(row: asyncpg.Record) -> dict[str, Any]:
    """A record as JSON (what replies, the CLI and tools see)."""
    out = {k: row[k] for k in _COLUMNS if k in row.keys()}
    for k, v in list(out.items()):
        if isinstance(v, datetime):
            out[k] = v.isoformat()
    return out


async def _upsert(conn: asyncpg.Connection, req: Any, n: Any) -> asyncpg.Record:
    """Create the record, or replace a pending duplicate (same thread, source, kind, dedupe key)."""
    if n.dedupe_key:
        row = await conn.fetchrow(
            "UPDATE notifications SET summary = $5, payload = coalesce($6, payload), priority = $7, "
            "attributes = attributes || $8, metadata = metadata || $9, coalesced_count = coalesced_count + 1, "
            "updated_at = now() WHERE thread_id = $1 AND source = $2 AND kind = $3 AND dedupe_key = $4 "
            "AND status = 'pending' RETURNING *",
            req.thread_id, n.source, n.kind, n.dedupe_key, n.summary, n.payload, n.priority, n.attributes, n.metadata)
        if row is not None:
            return row
    return await conn.fetchrow(
        "INSERT INTO notifications (id, thread_id, resource_id, agent_id, source, kind, priority, summary, payload, "
        "dedupe_key, coalesce_key, attributes, metadata) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13) RETURNING *",
        new_id("ntf"), req.thread_id, req.resource_id, req.agent_id, n.source, n.kind, n.priority, n.summary,
        n.payload, n.dedupe_key, n.coalesce_key, n.attributes, n.metadata)


async def _send(conn: asyncpg.Connection, row: asyncpg.Record, signal: dict[str, Any], *, topics: Topics,
                lease_ttl_s: float, wake: bool, stream_options: dict[str, Any], event_id: str,
                reply_to: str | None) -> Routed:
    req = SendSignal(event_id=event_id, agent_id=row["agent_id"], resource_id=row["resource_id"],
                     thread_id=row["thread_id"], signal=signal, reply_to=reply_to,
                     if_idle={"behavior": "wake" if wake else "persist", "stream_options": stream_options})
    return await route(conn, req, topics=topics, lease_ttl_s=lease_ttl_s, agent_known=True)


async def receive(conn: asyncpg.Connection, req: Any, *, policy: dict[str, Any], topics: Topics,
                  lease_ttl_s: float, digest_window_s: float, agent_known: bool) -> tuple[list[int], Event]:
    """``sendNotificationSignal``: store/merge records, decide each, act on what is due now."""
    ids: list[int] = []
    reply_topic = req.reply_to or topics.replies
    async with conn.transaction():
        from threadline.store.routing import RequestRejected, _seen

        if await _seen(conn, req.event_id) is not None:
            return ids, Notified(request_id=req.event_id, results=[])
        if not agent_known:
            raise RequestRejected("unknown_agent", f"no agent with id {req.agent_id!r}")
        await ensure_thread(conn, req.resource_id, req.thread_id)
        lease = await leases.lock_thread(conn, req.resource_id, req.thread_id)
        now = datetime.now(UTC)
        results = []
        for i, n in enumerate(req.notifications):
            row = await _upsert(conn, req, n)
            decision = await decide(policy, dict(row), active=lease.active, now=now, digest_window_s=digest_window_s)
            row, sent = await _act(conn, row, decision, active=lease.active, now=now, topics=topics,
                                   lease_ttl_s=lease_ttl_s, stream_options=req.if_idle.stream_options,
                                   event_id=f"{req.event_id}:{i}", reply_to=reply_topic, ids=ids)
            results.append({"record": record_view(row), "decision": decision.dump(), **sent})
        reply = Notified(request_id=req.event_id, results=results)
        ids.append(await outbox.add(conn, reply_topic, reply, key=req.event_id))
    return ids, reply


async def _act(conn: asyncpg.Connection, row: asyncpg.Record, d: Decision, *, active: bool, now: datetime,
               topics: Topics, lease_ttl_s: float, stream_options: dict[str, Any], event_id: str,
               reply_to: str | None, ids: list[int]) -> tuple[asyncpg.Record, dict[str, Any]]:
    rid = row["id"]
    if d.action == "discard":
        row = await conn.fetchrow("UPDATE notifications SET status = 'discarded', discarded_at = now(), "
                                  "delivery_reason = $2 WHERE id = $1 RETURNING *", rid, d.reason)
        return row, {}
    if d.action in ("persist", "hold"):
        row = await conn.fetchrow("UPDATE notifications SET delivery_reason = $2, deliver_at = NULL, summary_at = NULL "
                                  "WHERE id = $1 RETURNING *", rid, d.reason)
        return row, {}
    if d.action in ("defer", "summarize"):
        row = await conn.fetchrow("UPDATE notifications SET deliver_at = coalesce($2, deliver_at), "
                                  "summary_at = $3, delivery_reason = $4 WHERE id = $1 RETURNING *",
                                  rid, d.deliver_at, d.summary_at, d.reason)
        if d.action == "summarize" and row["priority"] == "high" and active and d.summary_at and d.summary_at <= now:
            # seed: an active thread gets the summary of a high notification now, the full one when idle
            routed = await _send(conn, row, digest_signal([dict(row)], pending=1), topics=topics,
                                 lease_ttl_s=lease_ttl_s, wake=False, stream_options=stream_options,
                                 event_id=event_id, reply_to=reply_to)
            ids.extend(routed.outbox_ids)
            sig = getattr(routed.reply, "signal_id", None)
            ids.append(await _announce(conn, topics, row, "summary_delivered", [rid], sig,
                                       getattr(routed.reply, "run_id", None)))
            row = await conn.fetchrow("UPDATE notifications SET summary_at = NULL, summarized = true, "
                                      "summary_signal_id = $2 WHERE id = $1 RETURNING *", rid, sig)
            return row, _sent(routed)
        return row, {}
    # deliver / queue: the full notification now
    routed = await _send(conn, row, notification_signal(dict(row)), topics=topics, lease_ttl_s=lease_ttl_s,
                         wake=True, stream_options=stream_options, event_id=event_id, reply_to=reply_to)
    row = await _mark_delivered(conn, row, routed, d.reason, topics)
    ids.extend(routed.outbox_ids)
    return row, _sent(routed)


def _sent(routed: Routed) -> dict[str, Any]:
    reply = routed.reply
    if reply is None or reply.type != "accepted":
        return {}
    return {"signal_id": reply.signal_id, "run_id": reply.run_id, "accepted": {"action": reply.action,
                                                                              "run_id": reply.run_id}}


async def _announce(conn: asyncpg.Connection, topics: Topics, row: asyncpg.Record, kind: str,
                    record_ids: list[str], signal_id: str | None, run_id: str | None) -> int:
    event = LifecycleEvent(type=kind, resource_id=row["resource_id"], thread_id=row["thread_id"],  # type: ignore[arg-type]
                           agent_id=row["agent_id"], run_id=run_id, notification_ids=record_ids, signal_id=signal_id)
    return await outbox.add(conn, topics.lifecycle, event, key=thread_key(row["resource_id"], row["thread_id"]))


async def _mark_delivered(conn: asyncpg.Connection, row: asyncpg.Record, routed: Routed, reason: str,
                          topics: Topics) -> asyncpg.Record:
    reply = routed.reply
    if reply is not None and reply.type == "accepted" and reply.action in ("wake", "deliver"):
        routed.outbox_ids.append(await _announce(conn, topics, row, "notification_delivered", [row["id"]],
                                                 reply.signal_id, reply.run_id))
        return await conn.fetchrow(
            "UPDATE notifications SET status = 'delivered', delivered_at = now(), delivered_signal_id = $2, "
            "delivery_reason = $3, deliver_at = NULL, summary_at = NULL, updated_at = now() WHERE id = $1 RETURNING *",
            row["id"], reply.signal_id, reason)
    return row


async def dispatch_due(conn: asyncpg.Connection, *, topics: Topics, lease_ttl_s: float, thread_id: str | None = None,
                       limit: int = 100) -> tuple[list[int], set[tuple[str, str]]]:
    """Deliver what is due (``deliver_at`` / ``summary_at`` reached), claimed with SKIP LOCKED so
    several schedulers never deliver a record twice. Per thread: individual records by priority,
    then one digest of the summary-due ones; a high record already summarised while the thread
    is active waits for idle (DECISIONS 11)."""
    ids: list[int] = []
    touched: set[tuple[str, str]] = set()
    async with conn.transaction():
        rows = await conn.fetch(
            "SELECT * FROM notifications WHERE status = 'pending' AND least(deliver_at, summary_at) <= now() "
            "AND ($1::text IS NULL OR thread_id = $1) ORDER BY least(deliver_at, summary_at), updated_at "
            "LIMIT $2 FOR UPDATE SKIP LOCKED", thread_id, limit)
        threads: dict[str, list[asyncpg.Record]] = {}
        for r in rows:
            threads.setdefault(r["thread_id"], []).append(r)
        now = datetime.now(UTC)
        for tid, recs in threads.items():
            touched.add((recs[0]["resource_id"], tid))
            lease = await leases.lock_thread(conn, recs[0]["resource_id"], tid)
            summary_due = [r for r in recs if r["summary_at"] is not None and r["summary_at"] <= now]
            individual = sorted((r for r in recs if r not in summary_due),
                                key=lambda r: (PRIORITY_RANK[r["priority"]], r["created_at"]))
            for r in individual:
                if r["summarized"] and lease.active:
                    continue  # its summary already reached the run; in full once the thread is idle
                try:
                    async with conn.transaction():
                        routed = await _send(conn, r, notification_signal(dict(r)), topics=topics,
                                             lease_ttl_s=lease_ttl_s, wake=True, stream_options={},
                                             event_id=f"deliver:{r['id']}:{r['delivery_attempts']}", reply_to=None)
                        await _mark_delivered(conn, r, routed, r["delivery_reason"] or "scheduled", topics)
                        ids.extend(routed.outbox_ids)
                except Exception as exc:  # noqa: BLE001 - retried with backoff by the next ticks
                    await _failed(conn, r, exc)
                lease = await leases.lock_thread(conn, r["resource_id"], tid)
            if summary_due:
                pending = await conn.fetchval("SELECT count(*) FROM notifications WHERE thread_id = $1 "
                                              "AND status = 'pending'", tid)
                all_low = all(r["priority"] == "low" for r in summary_due)
                routed = await _send(conn, summary_due[0], digest_signal([dict(r) for r in summary_due], pending=pending),
                                     topics=topics, lease_ttl_s=lease_ttl_s, wake=not all_low, stream_options={},
                                     event_id=f"digest:{summary_due[0]['id']}:{new_id()}", reply_to=None)
                ids.extend(routed.outbox_ids)
                sig = getattr(routed.reply, "signal_id", None)
                ids.append(await _announce(conn, topics, summary_due[0], "summary_delivered",
                                           [r["id"] for r in summary_due], sig, getattr(routed.reply, "run_id", None)))
                await conn.execute("UPDATE notifications SET summary_at = NULL, summarized = true, "
                                   "summary_signal_id = $2, updated_at = now() WHERE id = ANY($1::text[])",
                                   [r["id"] for r in summary_due], sig)
    return ids, touched


async def _failed(conn: asyncpg.Connection, r: asyncpg.Record, exc: Exception) -> None:
    attempts = r["delivery_attempts"] + 1
    await conn.execute(
        "UPDATE notifications SET delivery_attempts = $2, last_delivery_attempt_at = now(), last_delivery_error = $3, "
        "status = CASE WHEN $2 >= $4 THEN 'failed' ELSE status END, "
        "deliver_at = now() + make_interval(secs => power(2, $2)::int) WHERE id = $1",
        r["id"], attempts, f"{type(exc).__name__}: {exc}"[:500], MAX_DELIVERY_ATTEMPTS)
    log.warning("notification delivery failed", record_id=r["id"], attempts=attempts)

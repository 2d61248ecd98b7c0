"""How notifications and digests reach the model (docs/notifications.md)."""

from __future__ import annotations

from typing import Any

from threadline.inbox.policy import PRIORITY_RANK


def notification_signal(record: dict[str, Any]) -> dict[str, Any]:
    """The ``notification`` signal of one record, as delivered: caller attributes, then the
    built-ins (which win)."""
    attrs = {**(record.get("attributes") or {}), "id": record["id"], "source": record["source"],
             "type": record["kind"], "kind": record["kind"], "priority": record["priority"],
             "status": "delivered"}
    if record.get("coalesced_count", 1) > 1:
        attrs["coalescedCount"] = record["coalesced_count"]
    meta = {**(record.get("metadata") or {}), "notification": {
        "signal": "notification", "recordId": record["id"], "source": record["source"], "kind": record["kind"],
        "priority": record["priority"], "status": "delivered"}}  # as Mastra's: the signal is the delivery
    return {"type": "notification", "contents": record["summary"], "attributes": attrs, "metadata": meta}


def digest_signal(records: list[dict[str, Any]], *, pending: int) -> dict[str, Any]:
    """One ``notification-summary`` signal for a batch: counts per source, pending, top priority."""
    counts: dict[str, int] = {}
    for r in records:
        counts[r["source"]] = counts.get(r["source"], 0) + 1
    contents = ", ".join(f"{src}: {n}" for src, n in sorted(counts.items())) or "No pending notifications"
    top = min((r["priority"] for r in records), key=lambda p: PRIORITY_RANK[p], default="low")
    return {"type": "notification", "tag_name": "notification-summary", "contents": contents,
            "attributes": {"pending": pending, "priority": top},
            "metadata": {"notification": {"signal": "summary", "pending": pending,
                                          "groups": [{"source": s, "count": n} for s, n in sorted(counts.items())],
                                          "notificationIds": [r["id"] for r in records], "priority": top}}}


def combined_notification_signal(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``notification`` signal for records sharing a ``coalesce_key`` (docs/decisions.md §9): the
    summaries one per line, the first record's attributes, ``coalescedCount`` = how many
    notifications it stands for, ``notificationIds`` in the metadata."""
    if len(records) == 1:
        return notification_signal(records[0])
    first = records[0]
    sig = notification_signal(first)
    sig["contents"] = "\n".join(r["summary"] for r in records)
    top = min((r["priority"] for r in records), key=lambda p: PRIORITY_RANK[p])
    sig["attributes"].update(id=",".join(r["id"] for r in records), priority=top, coalesceKey=first["coalesce_key"],
                             coalescedCount=sum(r.get("coalesced_count", 1) for r in records))
    kinds = sorted({r["kind"] for r in records})
    if len(kinds) > 1:
        sig["attributes"].update(kind=",".join(kinds), type=",".join(kinds))
    sig["metadata"]["notification"].update(recordId=first["id"], notificationIds=[r["id"] for r in records],
                                           priority=top)
    return sig

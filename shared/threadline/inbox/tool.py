"""The inbox as an agent tool (issue 5, "inbox access ... as an agent tool"): the model can list,
read, mark seen, dismiss and archive the notifications of its own thread."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from threadline.config import get_settings
from threadline.store.db import connect
from threadline.runtime.tools import Tool, ToolContext, create_tool

_MARKS = {"seen": "seen_at", "dismiss": "dismissed_at", "archive": "archived_at"}
_STATUS = {"seen": "seen", "dismiss": "dismissed", "archive": "archived"}


class InboxInput(BaseModel):
    action: Literal["list", "read", "seen", "dismiss", "archive"] = "list"
    record_id: str | None = Field(default=None, description="the record, for read/seen/dismiss/archive")
    status: str | None = Field(default="pending", description="list only records with this status")


async def _inbox(input: InboxInput, context: ToolContext) -> dict[str, Any]:
    settings = get_settings()  # works behind a transaction pooler too (C24)
    conn = await connect(settings.pg_dsn, statement_cache=settings.pg_use_statement_cache)
    try:
        if input.action == "list":
            rows = await conn.fetch(
                "SELECT id, source, kind, priority, status, summary, coalesced_count FROM notifications "
                "WHERE thread_id = $1 AND resource_id = $2 AND ($3::text IS NULL OR status = $3) ORDER BY created_at",
                context.thread_id, context.resource_id, input.status)
            return {"records": [dict(r) for r in rows]}
        if not input.record_id:
            return {"error": "record_id is required"}
        if input.action == "read":
            row = await conn.fetchrow("SELECT id, source, kind, priority, status, summary, payload::text AS payload "
                                      "FROM notifications WHERE id = $1 AND thread_id = $2", input.record_id,
                                      context.thread_id)
            return dict(row) if row else {"error": "no such record"}
        done = await conn.execute(
            f"UPDATE notifications SET status = $3, {_MARKS[input.action]} = now(), updated_at = now() "
            "WHERE id = $1 AND thread_id = $2", input.record_id, context.thread_id, _STATUS[input.action])
        return {"updated": done.endswith(" 1"), "status": _STATUS[input.action]}
    finally:
        await conn.close()


def inbox_tool(id: str = "inbox") -> Tool:
    """A tool over the thread's notification inbox (list / read / seen / dismiss / archive).

    The model sees summaries, and ``read`` returns the stored ``payload`` (never shown otherwise).
    """
    return create_tool(id=id, description="List, read, mark seen, dismiss or archive this conversation's "
                                          "notifications.", input_schema=InboxInput, execute=_inbox)

"""The inbox as an agent tool: the model can list,
read, mark seen, dismiss and archive the notifications of its own thread."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, Field

from threadline.config import get_settings
from threadline.runtime.tools import Tool, ToolContext, create_tool
from threadline.store import inbox_access as access
from threadline.store.db import connect

_STATUS = {"seen": "seen", "dismiss": "dismissed", "archive": "archived"}
_BRIEF = ("id", "source", "kind", "priority", "status", "summary", "coalesced_count")


class InboxInput(BaseModel):
    action: Literal["list", "read", "seen", "dismiss", "archive"] = "list"
    record_id: str | None = Field(default=None, description="the record, for read/seen/dismiss/archive")
    status: str | None = Field(default="pending", description="list only records with this status")


def _pick(record: Mapping[str, object], keys: tuple[str, ...]) -> dict[str, object]:
    """``record``'s ``keys``, in that order (what the model sees of a record)."""
    return {k: record[k] for k in keys}


async def _inbox(input: InboxInput, context: ToolContext) -> dict[str, object]:
    where = {"resource_id": context.resource_id, "thread_id": context.thread_id}
    settings = get_settings()  # works behind a transaction pooler too (C24)
    conn = await connect(settings.pg_dsn, statement_cache=settings.pg_use_statement_cache)
    try:
        if input.action == "list":
            records = await access.list_records(conn, status=input.status, **where)
            return {"records": [_pick(r, _BRIEF) for r in records]}
        if not input.record_id:
            return {"error": "record_id is required"}
        if input.action == "read":
            row = await access.read_record(conn, record_id=input.record_id, **where)
            return _pick(row, (*_BRIEF, "payload")) if row else {"error": "no such record"}
        done = await access.mark(conn, record_id=input.record_id, status=_STATUS[input.action], **where)
        return {"updated": done is not None, "status": _STATUS[input.action]}
    finally:
        await conn.close()


def inbox_tool(id: str = "inbox") -> Tool:
    """A tool over the thread's notification inbox (list / read / seen / dismiss / archive).

    The model sees summaries, and ``read`` returns the stored ``payload`` (never shown otherwise).
    """
    return create_tool(id=id, description="List, read, mark seen, dismiss or archive this conversation's "
                                          "notifications.", input_schema=InboxInput, execute=_inbox)

"""D13 (store part): the pages of a thread's reads (``store/queries.py``, ``store/inbox_access.py``,
decision 221) — a page ends at its byte budget (one bigger row comes alone), walks by cursor
through rows that share a ``created_at`` hold every row once in the read's total order, whatever
the page size, another resource's thread reads as none, and the full-list reads still return the
whole thread (read page by page)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg
import orjson
import pytest

from threadline.store import inbox_access, paging, queries


def _content(size: int) -> str:
    return orjson.dumps({"format": 2, "parts": [{"type": "text", "text": "x" * size}]}).decode()


async def _thread(conn: asyncpg.Connection, sizes: list[int], *, tied: datetime) -> tuple[str, str]:
    """A thread whose messages have text of ``sizes`` bytes, every one at ``tied``; 25 runs and
    25 inbox records, all at ``tied`` too."""
    tag = uuid.uuid4().hex[:10]
    resource, thread = f"res-{tag}", f"thr-{tag}"
    await conn.execute("INSERT INTO threads (thread_id, resource_id) VALUES ($1, $2)", thread, resource)
    await conn.executemany("INSERT INTO messages (id, thread_id, resource_id, role, content, created_at) "
                           "VALUES ($1, $2, $3, 'user', $4::text::jsonb, $5)",
                           [(f"m-{uuid.uuid4().hex}", thread, resource, _content(size), tied) for size in sizes])
    await conn.copy_records_to_table("runs", columns=["run_id", "thread_id", "resource_id", "agent_id", "epoch",
                                                      "created_at", "text"],
                                     records=[(f"run-{uuid.uuid4().hex}", thread, resource, "a", 1, tied, "t" * 100)
                                              for _ in range(25)])
    await conn.copy_records_to_table("notifications", columns=["id", "thread_id", "resource_id", "agent_id", "source",
                                                               "kind", "priority", "summary", "created_at"],
                                     records=[(f"ntf-{uuid.uuid4().hex}", thread, resource, "a", "s", "k", "low", "x",
                                               tied) for _ in range(25)])
    return resource, thread


async def test_d13_a_page_ends_at_its_byte_budget_and_a_bigger_message_comes_alone(readers) -> None:
    db, conn = readers
    resource, thread = await _thread(conn, [100, 100, 5_000, 100, 100, 100], tied=datetime.now(UTC))
    sizes = []
    cursor = None
    while True:
        page, cursor = await queries.message_page(db, resource_id=resource, thread_id=thread, cursor=cursor,
                                                  limit=10, max_bytes=1_000)
        sizes.append([len(m["content"]["parts"][0]["text"]) for m in page])
        if cursor is None:
            break
    # a page keeps a row while the rows before it hold less than the budget (each row ~150 B of JSON)
    assert sizes == [[100, 100, 5_000], [100, 100, 100]]
    alone, cursor = await queries.message_page(db, resource_id=resource, thread_id=thread, limit=10, max_bytes=1)
    assert len(alone) == 1 and cursor is not None


@pytest.mark.parametrize("limit", [1, 3, 7, 1000])
async def test_d13_walks_through_tied_times_hold_every_row_once_in_order(readers, limit) -> None:
    db, conn = readers
    resource, thread = await _thread(conn, [10] * 25, tied=datetime(2026, 12, 6, 12, 0, 0, 123_456, tzinfo=UTC))
    expected = {
        "messages": [r[0] for r in await conn.fetch("SELECT id FROM messages WHERE thread_id = $1 ORDER BY position",
                                                    thread)],
        "runs": [r[0] for r in await conn.fetch("SELECT run_id FROM runs WHERE thread_id = $1 ORDER BY created_at, "
                                                "run_id", thread)],
        "inbox": [r[0] for r in await conn.fetch("SELECT id FROM notifications WHERE thread_id = $1 ORDER BY "
                                                 "created_at, id", thread)]}
    reads = {"messages": (queries.message_page, "id"), "runs": (queries.run_page, "run_id")}
    for name, (read, key) in reads.items():
        walked, cursor = [], None
        while True:
            page, cursor = await read(db, resource_id=resource, thread_id=thread, cursor=cursor, limit=limit)
            walked += [r[key] for r in page]
            if cursor is None:
                break
        assert walked == expected[name], name
    walked, cursor = [], None
    while True:
        records, cursor = await inbox_access.page_records(conn, resource_id=resource, thread_id=thread,
                                                          cursor=cursor, limit=limit)
        walked += [r["id"] for r in records]
        if cursor is None:
            break
    assert walked == expected["inbox"]
    full = await queries.list_messages(db, resource_id=resource, thread_id=thread)
    assert [m["id"] for m in full] == expected["messages"]


async def test_d13_another_resources_thread_pages_as_none_and_a_foreign_cursor_is_refused(readers) -> None:
    db, conn = readers
    _, thread = await _thread(conn, [10] * 3, tied=datetime.now(UTC))
    assert await queries.message_page(db, resource_id="someone-else", thread_id=thread) == ([], None)
    assert await queries.run_page(db, resource_id="someone-else", thread_id=thread) == ([], None)
    assert await inbox_access.page_records(conn, resource_id="someone-else", thread_id=thread) == ([], None)
    with pytest.raises(paging.CursorError):
        await queries.run_page(db, resource_id="r", thread_id=thread, cursor=paging.position_cursor(1))


async def test_d13_the_mastra_pages_count_apart_from_the_page(readers) -> None:
    db, conn = readers
    resource, thread = await _thread(conn, [10] * 7, tied=datetime.now(UTC))
    rows, total = await queries.page_messages(db, resource_id=resource, thread_id=thread, offset=5, limit=3)
    assert len(rows) == 2 and total == 7
    rows, total = await queries.page_messages(db, resource_id=resource, thread_id=thread, offset=9, limit=3)
    assert rows == [] and total == 7
    newest, _ = await queries.page_messages(db, resource_id=resource, thread_id=thread, offset=0, limit=1, descending=True)
    assert newest[0]["id"] == (await queries.list_messages(db, resource_id=resource, thread_id=thread))[-1]["id"]
    threads, count = await queries.page_threads(db, resource_id=resource, offset=0, limit=10)
    assert [t["id"] for t in threads] == [thread] and count == 1
    assert await queries.page_threads(db, resource_id=resource, offset=1, limit=10) == ([], 1)

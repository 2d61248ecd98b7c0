"""D13 (cases-3) against a running gateway: a large thread — 20,000 messages (2,000 turns, 50
tool results of 200 KB, 200 messages sharing one ``created_at``), 300 runs and 500 inbox records,
runs and records sharing times too — is read in pages (decision 221).

(a) ``…/messages``, ``…/runs`` and ``…/inbox`` answer one page with the default size (≤ 200) or
``limit=1000`` (capped there), a ``next_cursor``, within 1 s and at most 5 MB; (b) a walk of
``…/messages`` by its cursor while 40 messages are appended yields every message that existed
once, in ``position`` order, and each appended one at most once; the runs and inbox walks hold
every row once in ``(created_at, id)`` order; (c) 20 concurrent full walks through
``HttpThreadlineClient.messages()`` are identical and grow the gateway's RSS by less than 100 MB;
(d) a run on the thread reads only its memory window: the model is sent the same history as on a
10-message thread, and the run answers within twice that thread's time (+0.25 s of scheduling
noise on a shared machine)."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import orjson
import pytest

from tests.e2e.gateway_http import TENANT_A, GatewayInfo, thread_path
from threadline.client.client import HttpThreadlineClient
from threadline.store import paging

MESSAGES, TURNS, BIG, BIG_BYTES, TIED = 20_000, 2_000, 50, 200_000, 200
RUNS, RECORDS, APPENDED = 300, 500, 40
PAGE_S, PAGE_BYTES = 1.0, 5_000_000
AGENT, MODEL = "short-memory", "threadline-short-memory"  # memory: the last 2 messages


def _text(text: str) -> str:
    return orjson.dumps({"format": 2, "parts": [{"type": "text", "text": text}]}).decode()


def _tool_result(i: int) -> str:
    return orjson.dumps({"format": 2, "parts": [{"type": "tool-invocation", "toolInvocation": {
        "state": "result", "toolCallId": f"call-{i}", "toolName": "lookup", "args": {},
        "result": {"blob": "x" * BIG_BYTES}}}]}).decode()


def _message_rows(resource: str, thread: str, start: datetime) -> list[tuple]:
    """2,000 turns of 10 messages (user, then assistant); every 40th turn ends with a 200 KB tool
    result (50 in all, none among the last 200 messages); the 200 messages of
    turns 1000..1019 share one ``created_at`` (one transaction's ``now()``)."""
    rows = []
    for n in range(MESSAGES):
        turn = n // (MESSAGES // TURNS)
        role = "user" if n % 2 == 0 else "assistant"
        big = n % 400 == 199
        content = _tool_result(n) if big else _text(f"message {n} of turn {turn}: " + "lorem ipsum " * 40)
        at = start + timedelta(milliseconds=1000 * 10) if 10_000 <= n < 10_000 + TIED else \
            start + timedelta(milliseconds=n)
        rows.append((f"m-{thread}-{n:05d}", thread, resource, None, "assistant" if big else role, "v2", content, at))
    return rows


async def _seed(conn: asyncpg.Connection, resource: str, thread: str, *, small: bool = False) -> None:
    start = datetime.now(UTC) - timedelta(days=1)
    await conn.execute("INSERT INTO threads (thread_id, resource_id) VALUES ($1, $2)", thread, resource)
    columns = ["id", "thread_id", "resource_id", "run_id", "role", "type", "content", "created_at"]
    rows = _message_rows(resource, thread, start)
    await conn.copy_records_to_table("messages", records=rows[-10:] if small else rows, columns=columns)
    if small:
        return
    tied = start + timedelta(hours=1)  # a third of the runs and records share one time
    await conn.copy_records_to_table("runs", columns=["run_id", "thread_id", "resource_id", "agent_id", "epoch",
                                                      "status", "text", "created_at"], records=[
        (f"run-{uuid.uuid4().hex}", thread, resource, "echo-agent", 1, "finished", f"answer {i}",
         tied if i % 3 == 0 else start + timedelta(seconds=i)) for i in range(RUNS)])
    await conn.copy_records_to_table("notifications", columns=["id", "thread_id", "resource_id", "agent_id", "source",
                                                               "kind", "priority", "status", "summary", "created_at"],
                                     records=[(f"ntf-{uuid.uuid4().hex}", thread, resource, "echo-agent", "ci", "deploy",
                                               "low", "seen", f"record {i}", tied if i % 3 == 0 else
                                               start + timedelta(seconds=i)) for i in range(RECORDS)])


@pytest.fixture(scope="module")
async def big_thread(cluster) -> str:
    thread = f"d13-{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(cluster.dsn)
    try:
        await _seed(conn, TENANT_A, thread)
    finally:
        await conn.close()
    return thread


async def _page(http, path: str, **params: str) -> tuple[dict, float, int]:
    began = time.monotonic()
    r = await http.get(path, params=params)
    took = time.monotonic() - began
    assert r.status_code == 200, r.text
    return r.json(), took, len(r.content)


async def test_d13_every_list_read_answers_one_bounded_page(gateway: GatewayInfo, big_thread):
    path = thread_path(TENANT_A, big_thread)
    async with gateway.client(gateway.key_a) as http:
        for tail, key, total in (("messages", "messages", MESSAGES), ("runs", "runs", RUNS), ("inbox", "records", RECORDS)):
            for params in ({}, {"limit": "1000"}, {"limit": "100000"}):
                answer, took, size = await _page(http, f"{path}/{tail}", **params)
                rows = answer[key]
                cap = paging.DEFAULT_LIMIT if not params else paging.MAX_LIMIT
                assert 0 < len(rows) <= min(cap, total), (tail, params, len(rows))
                assert (answer["next_cursor"] is not None) == (len(rows) < total), (tail, params)
                assert tail == "messages" or len(rows) == min(cap, total)  # only content ends a page early
                assert took < PAGE_S and size <= PAGE_BYTES, (tail, params, took, size)
        for bad in ({"limit": "0"}, {"limit": "many"}, {"cursor": "not-a-cursor"}):
            r = await http.get(f"{path}/messages", params=bad)
            assert r.status_code == 422, (bad, r.text)
            assert r.json()["error"]["code"] == ("invalid_cursor" if "cursor" in bad else "invalid_argument")


async def _walk(http, path: str, key: str, limit: str, between=None) -> list[dict]:
    rows: list[dict] = []
    params = {"limit": limit}
    while True:
        answer, took, size = await _page(http, path, **params)
        assert took < PAGE_S and size <= PAGE_BYTES, (took, size)
        rows += answer[key]
        if between is not None:
            await between()
        if answer["next_cursor"] is None:
            return rows
        params["cursor"] = answer["next_cursor"]


async def test_d13_a_walk_by_cursor_yields_each_message_once_in_order_while_a_run_appends(cluster, gateway, big_thread):
    path = thread_path(TENANT_A, big_thread)
    conn = await asyncpg.connect(cluster.dsn)
    try:
        before = [r["id"] for r in await conn.fetch(
            "SELECT id FROM messages WHERE thread_id = $1 ORDER BY position", big_thread)]
        appended: list[str] = []

        async def append() -> None:  # 2 messages (a turn) after every page until 40 are in
            if len(appended) < APPENDED:
                ids = [f"live-{uuid.uuid4().hex}" for _ in range(2)]
                async with conn.transaction():  # one transaction: one created_at for both
                    for i, mid in enumerate(ids):
                        await conn.execute("INSERT INTO messages (id, thread_id, resource_id, role, type, content) "
                                           "VALUES ($1, $2, $3, $4, 'v2', $5::text::jsonb)", mid, big_thread, TENANT_A,
                                           ("user", "assistant")[i], _text("appended"))
                appended.extend(ids)

        async with gateway.client(gateway.key_a) as http:
            walked = await _walk(http, f"{path}/messages", "messages", "200", between=append)
            assert len(appended) == APPENDED
            ids = [m["id"] for m in walked]
            assert len(ids) == len(set(ids)), "a message came twice"
            old = [i for i in ids if not i.startswith("live-")]
            assert old == before, "every message that existed, once, in position order"
            live = [i for i in ids if i.startswith("live-")]
            assert set(live) <= set(appended) and live == [a for a in appended if a in set(live)]
            assert ids[:len(old)] == old  # appended ones never shuffle into earlier pages

            for tail, key, order_sql in (("runs", "runs", "SELECT run_id FROM runs WHERE thread_id = $1 "
                                                           "ORDER BY created_at, run_id"),
                                         ("inbox", "records", "SELECT id FROM notifications WHERE thread_id = $1 "
                                                              "ORDER BY created_at, id")):
                expected = [r[0] for r in await conn.fetch(order_sql, big_thread)]
                for limit in ("7", "100"):  # small pages cut through the tied times
                    rows = await _walk(http, f"{path}/{tail}", key, limit)
                    assert [r["run_id" if tail == "runs" else "id"] for r in rows] == expected, (tail, limit)
    finally:
        await conn.close()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def test_d13_twenty_concurrent_full_walks_are_identical_and_bounded(services, gateway, big_thread):
    pid = services.pid("gateway-1")
    async with HttpThreadlineClient(gateway.url, api_key=gateway.key_a, timeout_s=120) as client:
        await client.messages(resource_id=TENANT_A, thread_id=big_thread)  # warm: pools and caches
        base = _rss_mb(pid)
        peak = base
        done = asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _rss_mb(pid))
                await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample())
        walks = await asyncio.gather(*(client.messages(resource_id=TENANT_A, thread_id=big_thread) for _ in range(20)))
        done.set()
        await sampler
        digests = {orjson.dumps([m["id"] for m in w]) for w in walks}
        assert len(digests) == 1 and len(walks[0]) >= MESSAGES
        assert all(w == walks[0] for w in walks[1:])
        assert peak - base < 100, f"gateway RSS grew {peak - base:.0f} MB (from {base:.0f} MB)"


async def _answer_time(http, path: str, text: str) -> float:
    began = time.monotonic()
    r = await http.post(f"{path}/generate", json={"message": text, "agent_id": AGENT})
    assert r.status_code == 200, r.text
    return time.monotonic() - began


async def test_d13_a_run_on_a_large_thread_reads_only_its_memory_window(cluster, gateway, model, big_thread):
    small = f"d13-small-{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(cluster.dsn)
    try:
        await _seed(conn, TENANT_A, small, small=True)
    finally:
        await conn.close()
    times: dict[str, list[float]] = {"big": [], "small": []}
    async with gateway.client(gateway.key_a) as http:
        for i in range(3):
            for name, thread in (("small", small), ("big", big_thread)):
                mark = len(model.requests(MODEL))
                times[name].append(await _answer_time(http, thread_path(TENANT_A, thread), f"turn {i} on {name}"))
                sent = model.requests(MODEL)[mark:]
                assert len(sent) == 1, (name, len(sent))
                history = sent[0]["body"]["messages"]
                assert len(history) <= 4, (name, history)  # system, the window of 2, the new message
                assert i > 0 or name == "big" or "lorem ipsum" in orjson.dumps(history).decode()  # seeded turns read
    big_s, small_s = statistics.median(times["big"]), statistics.median(times["small"])
    assert big_s <= 2 * small_s + 0.25, times

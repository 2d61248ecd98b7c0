"""Inbox access for applications: list, read, mark seen, dismiss, archive — by thread
— through the client and the CLI (``threadline notify``, ``threadline inbox``). The agent tool is
tested in test_notifications.py (test_the_inbox_as_an_agent_tool)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import orjson
import pytest

from threadline.client import ThreadlineClient


async def test_client_lists_reads_and_marks_records_of_one_thread(services, settings, cluster):
    thread, other = f"th-inbox-{uuid.uuid4().hex[:8]}", f"th-inbox-{uuid.uuid4().hex[:8]}"
    notes = [{"source": "github", "kind": k, "summary": f"{k} news", "priority": "low", "payload": {"n": i}}
             for i, k in enumerate(("a", "b", "c"))]
    async with ThreadlineClient(settings) as tl:
        sent = (await tl.send_notification_signal(notes, agent_id="notes", resource_id="res-1", thread_id=thread)).results
        await tl.send_notification_signal({"source": "x", "kind": "y", "summary": "elsewhere", "priority": "low"},
                                          agent_id="notes", resource_id="res-1", thread_id=other)
        ids = [r["record"]["id"] for r in sent]
        listed = await tl.inbox(resource_id="res-1", thread_id=thread)
        assert [r["id"] for r in listed] == ids and all("payload" not in r for r in listed)
        assert await tl.inbox(resource_id="res-other", thread_id=thread) == []  # by thread and resource
        full = await tl.read_notification(ids[1], resource_id="res-1", thread_id=thread)
        assert full["payload"] == {"n": 1} and full["summary"] == "b news"
        assert await tl.read_notification(ids[1], resource_id="res-1", thread_id=other) is None
        assert (await tl.mark_seen(ids[0], resource_id="res-1", thread_id=thread))["status"] == "seen"
        assert (await tl.dismiss(ids[1], resource_id="res-1", thread_id=thread))["status"] == "dismissed"
        archived = await tl.archive(ids[2], resource_id="res-1", thread_id=thread)
        assert archived["status"] == "archived" and archived["archived_at"]
        assert await tl.mark_seen("ntf_nope", resource_id="res-1", thread_id=thread) is None
        with pytest.raises(ValueError):
            await tl.mark_notification(ids[0], "delivered", resource_id="res-1", thread_id=thread)
        assert await tl.inbox(resource_id="res-1", thread_id=thread, status="pending") == []
        assert [r["status"] for r in await tl.inbox(resource_id="res-1", thread_id=thread)] == [
            "seen", "dismissed", "archived"]


def _cli(cluster, *args: str) -> tuple[int, list[dict]]:
    env = {**os.environ, "THREADLINE_KAFKA_BOOTSTRAP": cluster.bootstrap, "THREADLINE_PG_DSN": cluster.dsn,
           "THREADLINE_TOPIC_PREFIX": cluster.prefix, "THREADLINE_PARTITIONS": "4"}
    done = subprocess.run([sys.executable, "-m", "threadline.cli", *args], env=env, capture_output=True, timeout=120)
    return done.returncode, [orjson.loads(line) for line in done.stdout.splitlines() if line.strip()]


async def test_cli_notify_and_inbox(services, cluster):
    thread = f"th-cli-{uuid.uuid4().hex[:8]}"
    where = ("--resource", "res-1", "--thread", thread)
    code, out = await asyncio.to_thread(_cli, cluster, "notify", "disk almost full", *where, "--agent", "notes",
                                        "--source", "pager", "--kind", "disk", "--priority", "low")
    assert code == 0 and out[0]["type"] == "notified"
    rid = out[0]["results"][0]["record"]["id"]
    code, listed = await asyncio.to_thread(_cli, cluster, "inbox", *where, "--status", "pending")
    assert code == 0 and [r["id"] for r in listed] == [rid] and listed[0]["summary"] == "disk almost full"
    code, read = await asyncio.to_thread(_cli, cluster, "inbox", *where, "--read", "--id", rid)
    assert code == 0 and read[0]["id"] == rid and "payload" in read[0]
    code, marked = await asyncio.to_thread(_cli, cluster, "inbox", *where, "--mark", "archived", "--id", rid)
    assert code == 0 and marked[0]["status"] == "archived" and marked[0]["archived_at"]
    code, err = await asyncio.to_thread(_cli, cluster, "inbox", *where, "--mark", "seen", "--id", "ntf_nope")
    assert code != 0 and err[0]["type"] == "error"

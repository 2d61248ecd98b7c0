"""Case B17 (docs/cases.md): a crash or a freeze between claiming due notifications and delivering
them neither strands nor doubles the delivery.

A scheduler's claim is the row locks of its delivery transaction (the thread's lease row, then the
due records, ``FOR UPDATE SKIP LOCKED``): the route of the signal, the wake run, the records'
``delivered`` mark and the lifecycle event commit together or not at all. A claimer killed -9 loses
its locks with its connection, and the other scheduler delivers on its next tick; a frozen claimer
keeps its locks (the other scheduler skips the thread) and finishes the delivery when it resumes,
so a slow-but-alive claimer is never raced into a second delivery (decision 28).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import collect_run, own_instances, rows, wait_idle
from tests.e2e.records import read_lifecycle
from threadline.client import ThreadlineClient
from threadline.testing.harness import wait_file

RES = "res-b17"
SUMMARIES = ("ci: build failed", "ci: tests flaky", "ci: deploy blocked")
DEFAULT_SCHEDULER = "notification_scheduler-1"


@pytest.fixture
def schedulers(services):
    """The session's scheduler stops for the test (S1 and S2 are the test's own), then comes back."""
    with own_instances(services, "notification_scheduler", DEFAULT_SCHEDULER) as started:
        yield started


def _user_texts(request: dict[str, Any]) -> list[str]:
    out = []
    for m in request["body"]["messages"]:
        if m["role"] != "user":
            continue
        c = m["content"]
        out.append(c if isinstance(c, str) else " ".join(p.get("text", "") for p in c if isinstance(p, dict)))
    return out


async def _lifecycle(cluster: Any, thread: str) -> list[dict[str, Any]]:
    return await read_lifecycle(cluster.bootstrap, f"{cluster.prefix}.lifecycle", thread_id=thread)


async def _delivered_within(dsn: str, thread: str, n: int, timeout_s: float) -> float:
    """Seconds until ``n`` records of the thread are ``delivered`` (AssertionError after ``timeout_s``)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        done = await rows(dsn, "SELECT 1 FROM notifications WHERE thread_id = $1 AND status = 'delivered'", thread)
        if len(done) == n:
            return time.monotonic() - t0
        await asyncio.sleep(0.1)
    states = await rows(dsn, "SELECT id, status, deliver_at, delivery_attempts FROM notifications WHERE thread_id = $1",
                        thread)
    raise AssertionError(f"not delivered within {timeout_s}s: {[dict(r) for r in states]}")


async def _assert_one_digest(cluster: Any, model: Any, thread: str) -> None:
    """The three records delivered once: one signal, one wake run whose first model request holds
    the three summaries in one signal, one ``notification_delivered``, nothing in between."""
    records = await rows(cluster.dsn, "SELECT * FROM notifications WHERE thread_id = $1", thread)
    assert len(records) == 3
    assert {r["status"] for r in records} == {"delivered"}
    assert len({r["delivered_signal_id"] for r in records}) == 1 and records[0]["delivered_signal_id"]
    assert not [r for r in records if r["deliver_at"] or r["summary_at"] or r["held"]]  # no intermediate state
    runs = await rows(cluster.dsn, "SELECT run_id, status FROM runs WHERE thread_id = $1", thread)
    assert len(runs) == 1, runs
    signals = await rows(cluster.dsn, "SELECT id FROM signals WHERE thread_id = $1", thread)
    assert [s["id"] for s in signals] == [records[0]["delivered_signal_id"]]
    assert await wait_idle(cluster.dsn, thread, 30)
    requests = [r for r in model.requests(model="threadline-b17")
                if any(SUMMARIES[0] in u for u in _user_texts(r))]
    assert len(requests) == 1, len(requests)
    carrying = [u for u in _user_texts(requests[0]) if any(s in u for s in SUMMARIES)]
    assert len(carrying) == 1 and all(s in carrying[0] for s in SUMMARIES), carrying
    events = await _lifecycle(cluster, thread)
    # each event once (read_lifecycle): a resumed claimer's flush may repeat a record (same event id)
    delivered = [e for e in events if e["type"] in ("notification_delivered", "summary_delivered")]
    assert len(delivered) == 1 and delivered[0]["type"] == "notification_delivered", delivered
    assert sorted(delivered[0]["notification_ids"]) == sorted(r["id"] for r in records)


async def _send_three(settings: Any, thread: str) -> None:
    async with ThreadlineClient(settings) as tl:
        notified = await tl.send_notification_signal(
            [{"source": "github", "kind": "ci-status", "priority": "medium", "summary": s, "coalesce_key": "ci"}
             for s in SUMMARIES], agent_id="B17", resource_id=RES, thread_id=thread)
    assert [r["decision"]["action"] for r in notified.results] == ["defer"] * 3  # they wait out the window


@pytest.mark.parametrize("variant", ["a-kill-after-claim", "b-kill-after-route", "c-freeze-after-claim"])
async def test_b17_a_crash_or_freeze_of_the_claimer_neither_strands_nor_doubles_the_digest(
        services, schedulers, settings, cluster, model, tmp_path: Path, variant: str) -> None:
    thread = f"th-b17{variant[0]}-{uuid.uuid4().hex[:8]}"
    point = "scheduler_after_route_before_mark" if variant.startswith("b") else "scheduler_after_claim"
    pause, release = tmp_path / "pause", tmp_path / "release"
    s1, s2 = f"b17-s1-{variant[0]}", f"b17-s2-{variant[0]}"
    services.start("notification_scheduler", s1, THREADLINE_PAUSE_POINTS=point, THREADLINE_PAUSE_FILE=str(pause),
                   THREADLINE_PAUSE_RELEASE=str(release))
    schedulers.append(s1)
    await _send_three(settings, thread)
    await asyncio.to_thread(wait_file, pause, point, 30)  # S1 holds the claim (after the 1 s window)
    await asyncio.to_thread(services.start, "notification_scheduler", s2)
    schedulers.append(s2)
    if variant.startswith("c"):
        services.freeze(s1)
        await asyncio.sleep(30)
        # nothing went out meanwhile: S2 skipped the thread whose rows the frozen S1 holds
        assert not await rows(cluster.dsn, "SELECT 1 FROM notifications WHERE thread_id = $1 AND status <> 'pending'",
                              thread)
        services.thaw(s1)
        release.touch()
    else:
        services.kill(s1)
    took = await _delivered_within(cluster.dsn, thread, 3, 15)  # the case's 10 s, with slack
    assert took <= 15
    await asyncio.sleep(3)  # a second delivery would show within a few ticks
    await _assert_one_digest(cluster, model, thread)
    assert all(services.alive().values())


async def test_b17d_the_full_notification_after_idle_survives_a_kill_after_claim(
        services, schedulers, settings, cluster, model, tmp_path: Path) -> None:
    thread = f"th-b17d-{uuid.uuid4().hex[:8]}"
    pause = tmp_path / "pause"
    s1, s2 = "b17-s1-d", "b17-s2-d"
    services.start("notification_scheduler", s1, THREADLINE_PAUSE_POINTS="scheduler_after_claim",
                   THREADLINE_PAUSE_FILE=str(pause))
    schedulers.append(s1)
    model.queue([{"chunks": [f"part {i} " for i in range(12)], "chunk_delay": 0.15},  # R streams slowly
                 {"chunks": ["Noted the outage."]}],  # R's next step, after the summary
                model="threadline-b17")  # then the wake run after idle: the default echo
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread(RES, thread)
        r = await (await tl.send_message("watch prod", agent_id="B17", resource_id=RES, thread_id=thread)).accepted
        async for chunk in sub.stream:
            if chunk["type"] == "text-delta":
                break  # T is active
        notified = await tl.send_notification_signal({"source": "pager", "kind": "outage", "priority": "high",
                                                      "summary": "prod is down"}, agent_id="B17", resource_id=RES,
                                                     thread_id=thread)
        result = notified.results[0]
        assert result["accepted"]["run_id"] == r.run_id  # its summary went into the running run at once
        await collect_run(sub, timeout_s=60)  # R ends; T goes idle and S1 claims the full delivery
        await asyncio.to_thread(wait_file, pause, "scheduler_after_claim", 30)
        await asyncio.to_thread(services.start, "notification_scheduler", s2)
        schedulers.append(s2)
        services.kill(s1)
        took = await _delivered_within(cluster.dsn, thread, 1, 15)  # the case's 10 s, with slack
        wake = await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
    assert took <= 15 and wake[-1]["type"] == "finish"
    await asyncio.sleep(3)
    runs = await rows(cluster.dsn, "SELECT run_id FROM runs WHERE thread_id = $1 ORDER BY created_at", thread)
    assert len(runs) == 2 and runs[0]["run_id"] == r.run_id, runs  # R, and exactly one wake run
    requests = model.requests(model="threadline-b17")
    assert len(requests) == 3, len(requests)  # R's two steps, then the wake run's one
    summaries = [sum(u.startswith("<notification-summary") for u in _user_texts(q)) for q in requests[:2]]
    assert summaries == [0, 1]  # the summary reached R once, in the step after it arrived
    full = [u for u in _user_texts(requests[2]) if u.startswith("<notification ") and "prod is down" in u]
    assert len(full) == 1  # the wake run got the full notification once
    events = await _lifecycle(cluster, thread)
    assert len([e for e in events if e["type"] == "notification_delivered"]) == 1
    assert len([e for e in events if e["type"] == "summary_delivered"]) == 1
    record = (await rows(cluster.dsn, "SELECT * FROM notifications WHERE thread_id = $1", thread))[0]
    assert record["status"] == "delivered" and record["summary_signal_id"] != record["delivered_signal_id"]
    assert all(services.alive().values())

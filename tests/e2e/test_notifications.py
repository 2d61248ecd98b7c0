"""The notification inbox end to end on the real cluster: the default policy's priority ×
active/idle cells, the vectors N1–N15 (docs/cases.md) as adapted by docs/decisions.md (9–11) and
Threadline's low-while-active decision (docs/notifications.md), ``queue`` and ``hold``, timed
delivery with the scheduler's test clock, lifecycle events, the inbox tool.

Vectors N8, N13 and N15 are pure logic: tests/unit/test_notification_vectors.py. Case C19, the
1,000-record race and inbox access (client, CLI): test_notifications_c19.py.
"""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from tests.e2e.helpers import collect_run, rows, wait_idle
from tests.e2e.records import read_lifecycle
from threadline.client import ThreadlineClient
from threadline.inbox.policy import retry_delay_s
from threadline.store.clock import set_offset

SLOW = [f"w{i} " for i in range(14)]  # a run that streams for ~2 s: the thread is active meanwhile


def _thread() -> str:
    return f"th-note-{uuid.uuid4().hex[:8]}"


def _users(request) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "user"]


async def _notify(tl, thread, agent="notes", **fields):
    note = {"source": "github", "kind": "ci-status", "summary": "CI failed", **fields}
    return (await tl.send_notification_signal(note, agent_id=agent, resource_id="res-1", thread_id=thread)).results[0]


async def _record(dsn, record_id):
    return (await rows(dsn, "SELECT * FROM notifications WHERE id = $1", record_id))[0]


async def _until(check, timeout_s: float = 30.0, every_s: float = 0.2):
    """Poll ``check()`` (async) until it returns something truthy; return it."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        found = await check()
        if found or asyncio.get_running_loop().time() > deadline:
            return found
        await asyncio.sleep(every_s)


async def _busy(tl, sub, thread, agent="notes", text="work"):
    """Start a slow run on ``thread`` and return its id once it streams (the thread is active)."""
    run = await (await tl.send_message(text, agent_id=agent, resource_id="res-1", thread_id=thread)).accepted
    async for chunk in sub.stream:
        if chunk["type"] == "text-delta":
            return run.run_id
    raise AssertionError("the run did not stream")


@pytest.fixture(scope="session")
def clock_scheduler(services):
    """The notification-scheduler(s) of this session read the test clock (THREADLINE_SCHEDULER_TEST_CLOCK,
    see threadline.store.clock); every later start of a service keeps the setting."""
    if services.env.get("THREADLINE_SCHEDULER_TEST_CLOCK") != "1":
        services.env["THREADLINE_SCHEDULER_TEST_CLOCK"] = "1"
        services.stop("notification_scheduler-1")
        services.start("notification_scheduler", "notification_scheduler-1")
    return services


class Clock:
    """Moves the scheduler's clock forward (an offset from real time) without sleeping."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.offset_s = 0.0

    async def advance(self, seconds: float) -> None:
        self.offset_s += seconds
        conn = await asyncpg.connect(self.dsn)
        try:
            await set_offset(conn, self.offset_s)
        finally:
            await conn.close()


@pytest.fixture
async def clock(clock_scheduler, cluster):
    c = Clock(cluster.dsn)
    await c.advance(0)
    yield c
    c.offset_s = 0
    await c.advance(0)


# --- the default policy: idle thread -------------------------------------------------------------
async def _idle_delivery(settings, model, priority, reason, **fields):
    thread = _thread()
    model.queue([{"chunks": ["noted"]}], model="threadline-notes")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        res = await _notify(tl, thread, priority=priority, summary=f"{priority} thing", **fields)
        chunks = await collect_run(sub)
        await sub.unsubscribe()
        # Mastra's result: the created signal, and the woken run's output (accepted.output)
        assert await res["output"].text(timeout_s=30) == "noted"
    assert res["signal"]["id"].startswith("sig_") and res["signal"]["contents"] == f"{priority} thing"
    assert "signal_id" not in res and res["run_id"] == res["accepted"]["run_id"]  # Mastra's {signal, runId, …}
    assert res["signal"]["type"] == "notification" and res["signal"]["acceptedAt"] and "persisted" not in res
    assert res["signal"]["metadata"]["notification"]["status"] == "delivered"
    assert res["decision"]["action"] == "deliver" and res["decision"]["reason"] == reason
    assert res["accepted"]["action"] == "wake" and res["record"]["status"] == "delivered"
    assert res["record"]["delivered_signal_id"] == res["signal"]["id"]
    # Mastra's NotificationRecord: fields that hold a value, none of the inbox's own bookkeeping
    assert None not in res["record"].values() and not {"held", "summarized"} & set(res["record"])
    assert ("attributes" in res["record"]) == bool(fields.get("attributes"))  # as given
    assert next(c for c in chunks if c["type"] == "data-signal")["data"]["type"] == "notification"
    last = _users(model.requests(model="threadline-notes")[-1])[-1]
    assert last.startswith("<notification ") and f'priority="{priority}"' in last and f">{priority} thing<" in last
    return last


async def test_urgent_on_idle_thread_wakes_a_run(services, settings, model):
    await _idle_delivery(settings, model, "urgent", "urgent")


async def test_n2_high_on_idle_thread_wakes_a_run(services, settings, model):
    await _idle_delivery(settings, model, "high", "idle-high")


async def test_n15_builtin_attributes_win_in_what_the_model_reads(services, settings, model):
    seen = await _idle_delivery(settings, model, "urgent", "urgent", attributes={"type": "x", "repo": "a"})
    assert 'type="ci-status"' in seen and 'repo="a"' in seen and 'type="x"' not in seen


async def test_n8_sources_beat_priorities_on_the_cluster(services, settings, model, cluster):
    thread = _thread()
    # the policy: {decide: () => None, sources: {github: discard}, priorities: {urgent: persist}}
    async with ThreadlineClient(settings) as tl:
        github = await _notify(tl, thread, agent="notes-sources", priority="urgent")
        slack = await _notify(tl, thread, agent="notes-sources", priority="urgent", source="slack")
    # a policy's decision is the one it gave, with no reason of ours (Mastra's `{action: "discard"}`)
    assert github["decision"] == {"action": "discard"}
    assert github["record"]["status"] == "discarded" and "delivery_reason" not in github["record"]
    assert github["record"]["discarded_at"]  # Mastra's discardedAt
    assert slack["decision"] == {"action": "persist"}
    assert slack["record"]["status"] == "pending" and "accepted" not in slack


async def test_n5_medium_on_idle_thread_wakes_a_run(services, settings, model):
    await _idle_delivery(settings, model, "medium", "idle-medium")


async def test_n6_low_on_idle_thread_is_a_digest_for_subscribers_only(services, settings, model, cluster):
    thread = _thread()
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        low = await _notify(tl, thread, priority="low", summary="fyi")
        digest = await collect_run(sub, timeout_s=20)  # at the next tick, with no model call
        await sub.unsubscribe()
    assert low["decision"] == {"action": "summarize", "reason": "idle-low-summary", "summaryAt": low["decision"]["summaryAt"]}
    assert "accepted" not in low  # nothing sent at receipt
    assert [c["type"] for c in digest] == ["start", "data-signal", "finish"]
    assert digest[1]["data"]["tagName"] == "notification-summary" and digest[1]["data"]["contents"] == "github: 1"
    assert model.requests(model="threadline-notes") == []
    assert await rows(cluster.dsn, "SELECT 1 FROM runs WHERE thread_id = $1", thread) == []
    rec = await _record(cluster.dsn, low["record"]["id"])
    # docs/decisions.md#records-after-a-summary
    assert rec["status"] == "pending" and rec["summary_at"] is None and rec["summary_signal_id"]


# --- the default policy: active thread -----------------------------------------------------------
async def test_n1_urgent_on_active_thread_is_delivered_into_the_run(services, settings, model, cluster):
    thread = _thread()
    model.queue([{"chunks": SLOW, "chunk_delay": 0.12}, {"chunks": ["on it"]}], model="threadline-notes")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        run_id = await _busy(tl, sub, thread)
        res = await _notify(tl, thread, priority="urgent", summary="prod down")
        chunks = await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
    assert res["decision"] == {"action": "deliver", "reason": "urgent"}
    assert res["accepted"] == {"action": "deliver", "run_id": run_id}
    rec = await _record(cluster.dsn, res["record"]["id"])
    assert rec["status"] == "delivered" and rec["delivery_reason"] == "urgent"
    assert rec["delivered_signal_id"] == res["signal"]["id"]
    assert {c["runId"] for c in chunks} == {run_id}
    requests = model.requests(model="threadline-notes")
    assert len(requests) == 2 and ">prod down</notification>" in _users(requests[1])[-1]  # the run's next step


async def test_n3_high_on_active_thread_summary_now_full_once_when_idle(services, settings, model, cluster):
    thread = _thread()
    model.queue([{"chunks": SLOW, "chunk_delay": 0.12}, {"chunks": ["got the summary"]},
                 {"chunks": ["full one read"]}], model="threadline-notes")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        run_id = await _busy(tl, sub, thread)
        high = await _notify(tl, thread, priority="high", summary="CI failed (3)", dedupe_key="ci:main")
        again = await _notify(tl, thread, priority="high", summary="CI failed (4)", dedupe_key="ci:main")
        chunks = await collect_run(sub, runs=2, timeout_s=60)
        await sub.unsubscribe()
    assert high["decision"]["reason"] == "active-high-summary-then-full" and high["accepted"]["action"] == "deliver"
    view = high["record"]  # the summary is out, the full delivery waits for idle
    assert view["status"] == "pending" and view["deliver_at"] and "summary_at" not in view
    assert view["summary_signal_id"] == high["signal"]["id"]
    assert again["record"]["id"] == high["record"]["id"] and again["record"]["coalesced_count"] == 2  # dedupe
    assert "accepted" not in again  # one summary for the record, not one per merge
    requests = model.requests(model="threadline-notes")
    assert any(u.startswith("<notification-summary") for u in _users(requests[1]))  # the summary reached the run
    assert not any(u.startswith("<notification ") for r in requests[:2] for u in _users(r))
    runs = [c["runId"] for c in chunks if c["type"] == "finish"]
    assert runs[0] == run_id and runs[1] != run_id
    full = [u for u in _users(requests[-1]) if u.startswith("<notification ")]
    assert len(full) == 1 and ">CI failed (4)<" in full[0] and 'coalescedCount="2"' in full[0]
    rec = await _record(cluster.dsn, high["record"]["id"])
    assert rec["status"] == "delivered" and rec["summarized"] is True
    assert await wait_idle(cluster.dsn, thread)


async def test_n4_medium_on_active_thread_summary_now_then_inbox_only(services, settings, model, cluster):
    thread = _thread()
    model.queue([{"chunks": SLOW, "chunk_delay": 0.12}, {"chunks": ["summary noted"]}], model="threadline-notes")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        run_id = await _busy(tl, sub, thread)
        med = await _notify(tl, thread, priority="medium", summary="PR review asked")
        await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
    assert med["decision"]["reason"] == "active-batch-summary"
    assert med["accepted"] == {"action": "deliver", "run_id": run_id}
    view = med["record"]
    assert (view["status"], view.get("summary_at"), view.get("deliver_at"), view["summarized"]) == ("pending", None, None,
                                                                                                True)
    requests = model.requests(model="threadline-notes")
    assert _users(requests[1])[-1] == '<notification-summary pending="1" priority="medium">github: 1</notification-summary>'
    assert await wait_idle(cluster.dsn, thread)
    rec = await _record(cluster.dsn, view["id"])  # never due again: no schedule left
    assert rec["status"] == "pending" and rec["deliver_at"] is None and rec["summary_at"] is None
    assert len(model.requests(model="threadline-notes")) == 2


async def test_n7_low_digest_waits_for_idle_then_reaches_subscribers_only(services, settings, model, cluster):
    """Threadline decision (adapting N7): low records never enter an active run; the digest that
    fell due while the thread was active goes out when it is idle, as a subscriber-only digest."""
    thread = _thread()
    model.queue([{"chunks": SLOW + SLOW, "chunk_delay": 0.12}], model="threadline-notes")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        run_id = await _busy(tl, sub, thread)
        low = await _notify(tl, thread, priority="low", summary="fyi")
        chunks = await collect_run(sub, runs=2, timeout_s=60)
        await sub.unsubscribe()
    assert low["decision"]["reason"] == "active-batch-summary" and "accepted" not in low
    finishes = [i for i, c in enumerate(chunks) if c["type"] == "finish"]
    assert chunks[finishes[0]]["runId"] == run_id
    digest = chunks[finishes[0] + 1:]
    assert [c["type"] for c in digest] == ["start", "data-signal", "finish"]
    assert digest[1]["data"]["tagName"] == "notification-summary" and digest[1]["data"]["contents"] == "github: 1"
    assert digest[0]["runId"] != run_id
    assert await rows(cluster.dsn, "SELECT 1 FROM runs WHERE run_id = $1", digest[0]["runId"]) == []
    requests = model.requests(model="threadline-notes")
    assert len(requests) == 1 and not any("notification" in u for u in _users(requests[0]))
    rec = await _record(cluster.dsn, low["record"]["id"])
    assert rec["status"] == "pending" and rec["summary_at"] is None and rec["summary_signal_id"]


# --- custom policies, queue, hold, persist ---------------------------------------------------------
async def test_custom_policy_seed_example_low_digest_thirty_minutes_later(services, settings, model, cluster, clock):
    thread = _thread()
    async with ThreadlineClient(settings) as tl:
        low = await _notify(tl, thread, agent="notes-custom", priority="low")
        spam = await _notify(tl, thread, agent="notes-custom", priority="urgent", source="spam")
    assert low["decision"]["action"] == "summarize"
    rec = await _record(cluster.dsn, low["record"]["id"])
    assert rec["status"] == "pending" and rec["summary_at"] is not None
    assert 29 * 60 < (rec["summary_at"] - rec["created_at"]).total_seconds() < 31 * 60  # 30 minutes later
    assert spam["decision"]["action"] == "discard" and spam["record"]["status"] == "discarded"  # sources beat priorities
    await clock.advance(31 * 60)  # the scheduler's clock crosses the window: the digest goes out

    async def summarised():
        r = await _record(cluster.dsn, low["record"]["id"])
        return r if r["summary_signal_id"] else None

    rec = await _until(summarised)
    assert rec and rec["status"] == "pending" and rec["summary_at"] is None


async def test_n9_persist_stays_in_the_inbox_and_is_never_dispatched(services, settings, model, cluster, clock):
    thread = _thread()
    async with ThreadlineClient(settings) as tl:
        kept = await _notify(tl, thread, agent="notes-actions", kind="persist-me", priority="urgent")
        assert kept["decision"]["action"] == "persist" and "accepted" not in kept
        view = kept["record"]
        assert (view["status"], view.get("deliver_at"), view.get("summary_at")) == ("pending", None, None)
        await clock.advance(24 * 3600)  # a day later, for the scheduler
        sentinel = await _notify(tl, thread, agent="notes-actions", kind="other", priority="low")

    async def digested():
        r = await _record(cluster.dsn, sentinel["record"]["id"])
        return r if r["summary_signal_id"] else None

    assert await _until(digested)  # a scheduler pass ran on this thread after the clock moved
    rec = await _record(cluster.dsn, view["id"])
    assert rec["status"] == "pending" and rec["summary_signal_id"] is None and rec["delivered_signal_id"] is None
    sigs = await rows(cluster.dsn, "SELECT payload FROM signals WHERE thread_id = $1", thread)
    assert [s["payload"]["metadata"]["notification"]["notificationIds"] for s in sigs] == [[sentinel["record"]["id"]]]


async def test_queue_action_is_the_next_turn_not_the_running_run(services, settings, model, cluster):
    thread = _thread()
    model.queue([{"chunks": SLOW, "chunk_delay": 0.12}, {"chunks": ["queued one read"]}], model="threadline-actions")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        run_id = await _busy(tl, sub, thread, agent="notes-actions")
        queued = await _notify(tl, thread, agent="notes-actions", kind="queue-me", summary="deploy finished")
        chunks = await collect_run(sub, runs=2, timeout_s=60)
        await sub.unsubscribe()
    assert queued["decision"]["action"] == "queue"
    next_run = queued["accepted"]["run_id"]
    assert queued["accepted"]["action"] == "deliver" and next_run != run_id  # not the running run
    assert [c["runId"] for c in chunks if c["type"] == "finish"] == [run_id, next_run]
    requests = model.requests(model="threadline-actions")
    assert len(requests) == 2 and not any("deploy finished" in u for u in _users(requests[0]))
    assert _users(requests[1])[-1].startswith("<notification ") and ">deploy finished<" in _users(requests[1])[-1]
    assert (await _record(cluster.dsn, queued["record"]["id"]))["status"] == "delivered"
    # on an idle thread, queue is a wake (like queueMessage)
    assert await wait_idle(cluster.dsn, thread)
    model.queue([{"chunks": ["idle one read"]}], model="threadline-actions")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        idle = await _notify(tl, thread, agent="notes-actions", kind="queue-me", summary="second deploy")
        await collect_run(sub)
        await sub.unsubscribe()
    assert idle["accepted"]["action"] == "wake"


async def test_hold_is_re_decided_by_the_policy_when_the_thread_goes_idle(services, settings, model, cluster):
    thread = _thread()
    model.queue([{"chunks": SLOW, "chunk_delay": 0.12}, {"chunks": ["held one read"]}], model="threadline-actions")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        run_id = await _busy(tl, sub, thread, agent="notes-actions")
        held = await _notify(tl, thread, agent="notes-actions", kind="hold-me", summary="wait for me")
        view = held["record"]
        assert held["decision"]["action"] == "hold" and "accepted" not in held
        assert (view["status"], view["held"], view.get("deliver_at"), view.get("summary_at")) == ("pending", True, None,
                                                                                                   None)
        chunks = await collect_run(sub, runs=2, timeout_s=60)
        await sub.unsubscribe()
    runs = [c["runId"] for c in chunks if c["type"] == "finish"]
    assert runs[0] == run_id and runs[1] != run_id  # the policy, asked again at idle, delivered it: a wake
    requests = model.requests(model="threadline-actions")
    assert len(requests) == 2 and not any("wait for me" in u for u in _users(requests[0]))
    assert ">wait for me<" in _users(requests[1])[-1]
    rec = await _record(cluster.dsn, view["id"])
    assert (rec["status"], rec["held"], rec["delivery_reason"]) == ("delivered", False, "released-on-idle")


# --- dedupe vs coalesce (docs/decisions.md#dedupe-and-coalesce) ------------------------------------------
async def test_n10_dedupe_key_merges_pending_records(services, settings, model, cluster):
    thread = _thread()
    async with ThreadlineClient(settings) as tl:
        first = await _notify(tl, thread, priority="low", summary="PR opened", dedupe_key="pr-1",
                              attributes={"repo": "a"})
        second = await _notify(tl, thread, priority="low", summary="PR updated", dedupe_key="pr-1",
                               attributes={"branch": "b"})
        other_kind = await _notify(tl, thread, priority="low", kind="review", dedupe_key="pr-1")
    rec = second["record"]
    assert rec["id"] == first["record"]["id"] and rec["coalesced_count"] == 2 and rec["summary"] == "PR updated"
    assert rec["attributes"] == {"repo": "a", "branch": "b"}
    assert other_kind["record"]["id"] != rec["id"]  # dedupe keys include the kind (K6)
    # delivered with coalescedCount="2": see test_n3 (the high record merged from two sends)


async def test_n10_coalesce_key_records_stay_apart_and_go_out_together(services, settings, model, cluster, clock):
    thread = _thread()
    async with ThreadlineClient(settings) as tl:
        lows = [{"source": "github", "kind": kind, "summary": kind, "priority": "low", "coalesce_key": "main"}
                for kind in ("ci-status", "review-request")]
        n1, n2 = (await tl.send_notification_signal(lows, agent_id="notes", resource_id="res-1",
                                                    thread_id=thread)).results
        assert n1["record"]["id"] != n2["record"]["id"]  # C19: different kinds never merge

        async def digested():
            got = await rows(cluster.dsn, "SELECT summary_signal_id FROM notifications WHERE thread_id = $1 "
                             "AND summary_signal_id IS NOT NULL", thread)
            return got if len(got) == 2 else None

        got = await _until(digested)
        assert got and got[0]["summary_signal_id"] == got[1]["summary_signal_id"]  # one digest for both
        digest = await rows(cluster.dsn, "SELECT payload FROM signals WHERE id = $1", got[0]["summary_signal_id"])
        assert digest[0]["payload"]["contents"] == "github: 2"
        # individual deliveries of one coalesce key: one combined notification (timed, via the test clock)
        model.queue([{"chunks": ["both read"]}], model="threadline-actions")
        thread2 = _thread()
        sub = await tl.subscribe_to_thread("res-1", thread2)
        notes = [{"source": "github", "kind": "later-a", "summary": "build 1 red", "coalesce_key": "pr-7"},
                 {"source": "github", "kind": "later-b", "summary": "build 2 red", "coalesce_key": "pr-7"}]
        sent = (await tl.send_notification_signal(notes, agent_id="notes-actions", resource_id="res-1",
                                                  thread_id=thread2)).results
        assert [r["decision"]["action"] for r in sent] == ["defer", "defer"]
        await clock.advance(2 * 3600)
        chunks = await collect_run(sub, timeout_s=30)
        await sub.unsubscribe()
    echoes = [c for c in chunks if c["type"] == "data-signal"]
    assert len(echoes) == 1 and echoes[0]["data"]["contents"] == "build 1 red\nbuild 2 red"
    assert echoes[0]["data"]["attributes"]["coalescedCount"] == 2
    recs = await rows(cluster.dsn, "SELECT status, delivered_signal_id FROM notifications WHERE thread_id = $1", thread2)
    assert {r["status"] for r in recs} == {"delivered"} and len({r["delivered_signal_id"] for r in recs}) == 1


async def test_n11_dedupe_after_delivery_creates_a_new_record(services, settings, model, cluster):
    thread = _thread()
    model.queue([{"chunks": ["one"]}, {"chunks": ["two"]}], model="threadline-notes")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        first = await _notify(tl, thread, priority="urgent", dedupe_key="pr-1", summary="first")
        await collect_run(sub)
        assert await wait_idle(cluster.dsn, thread)
        second = await _notify(tl, thread, priority="urgent", dedupe_key="pr-1", summary="second")
        await collect_run(sub)
        await sub.unsubscribe()
    assert first["record"]["status"] == "delivered"
    assert second["record"]["id"] != first["record"]["id"] and second["record"]["coalesced_count"] == 1


# --- failures, ordering, lifecycle -------------------------------------------------------------------
async def test_n12_rejected_delivery_retried_with_backoff_then_failed(services, settings, cluster, clock):
    thread = _thread()
    conn = await asyncpg.connect(cluster.dsn)
    try:  # a record routing must reject: its thread belongs to another resource
        await conn.execute("INSERT INTO threads (thread_id, resource_id) VALUES ($1, 'res-owner')", thread)
        await conn.execute(
            "INSERT INTO notifications (id, thread_id, resource_id, agent_id, source, kind, priority, summary, "
            "deliver_at) VALUES ($1, $2, 'res-intruder', 'notes', 'github', 'ci-status', 'medium', 'x', now())",
            f"ntf-n12-{thread}", thread)
    finally:
        await conn.close()
    rid = f"ntf-n12-{thread}"
    for attempt in range(1, 6):
        async def attempted(n=attempt):
            r = await _record(cluster.dsn, rid)
            return r if r["delivery_attempts"] >= n else None

        rec = await _until(attempted)
        assert rec and rec["delivery_attempts"] == attempt
        assert "thread_owned_by_other_resource" in rec["last_delivery_error"]
        if attempt < 5:
            assert rec["status"] == "pending"
            wait = (rec["deliver_at"] - rec["last_delivery_attempt_at"]).total_seconds()
            assert wait == pytest.approx(retry_delay_s(attempt))  # 5, 10, 20, 40 s
            await clock.advance(wait + 1)
    assert rec["status"] == "failed" and rec["deliver_at"] is None and rec["delivered_signal_id"] is None
    assert [retry_delay_s(n) for n in range(1, 5)] == [5, 10, 20, 40]


async def test_n14_due_items_go_urgent_then_medium_then_the_low_digest(services, settings, model, cluster, clock):
    thread = _thread()
    model.queue([{"chunks": ["handled"]}, {"chunks": ["handled too"]}], model="threadline-actions")
    notes = [{"source": "ci", "kind": "later", "priority": "low", "summary": "lint warning"},
             {"source": "pager", "kind": "later", "priority": "medium", "summary": "disk 80%"},
             {"source": "pager", "kind": "later", "priority": "urgent", "summary": "disk 99%"}]
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        sent = (await tl.send_notification_signal(notes, agent_id="notes-actions", resource_id="res-1",
                                                  thread_id=thread)).results
        assert [r["decision"]["action"] for r in sent] == ["summarize", "defer", "defer"]
        await clock.advance(2 * 3600)  # all three fall due in the same scheduler pass
        chunks = await collect_run(sub, runs=2, timeout_s=60)
        await sub.unsubscribe()
    echoes = [c["data"] for c in chunks if c["type"] == "data-signal"]
    assert [(e.get("tagName"), e["contents"]) for e in echoes] == [
        ("notification", "disk 99%"), ("notification", "disk 80%"), ("notification-summary", "ci: 1")]
    sigs = await rows(cluster.dsn, "SELECT payload FROM signals WHERE thread_id = $1 ORDER BY seq", thread)
    assert [s["payload"]["contents"] for s in sigs] == ["disk 99%", "disk 80%", "ci: 1"]
    assert chunks[-1]["type"] == "finish" and [c["type"] for c in chunks[-3:]] == ["start", "data-signal", "finish"]


async def test_lifecycle_announces_deliveries(services, settings, model, cluster):
    thread = _thread()
    model.queue([{"chunks": ["ok"]}], model="threadline-notes")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        res = await _notify(tl, thread, priority="urgent")
        await collect_run(sub)
        await sub.unsubscribe()
    events = await read_lifecycle(cluster.bootstrap, f"{cluster.prefix}.lifecycle", thread_id=thread)
    found = [e for e in events if e["type"] == "notification_delivered"]
    assert len(found) == 1 and found[0]["notification_ids"] == [res["record"]["id"]]


async def test_the_inbox_as_an_agent_tool(services, settings, model, cluster):
    from threadline.testing import model_script as ms

    thread = _thread()
    async with ThreadlineClient(settings) as tl:
        rec = await _notify(tl, thread, agent="inbox-agent", priority="low", summary="deploy done",
                            payload={"sha": "abc"})
        rid = rec["record"]["id"]
        model.queue([ms.tool_calls(ms.tool_call("inbox", {"action": "list"})),
                     ms.tool_calls(ms.tool_call("inbox", {"action": "read", "record_id": rid})),
                     ms.tool_calls(ms.tool_call("inbox", {"action": "seen", "record_id": rid})),
                     ms.tool_calls(ms.tool_call("inbox", {"action": "archive", "record_id": rid})),
                     ms.tool_calls(ms.tool_call("inbox", {"action": "dismiss", "record_id": rid})),
                     ms.text("handled")], model="threadline-inbox")
        sub = await tl.subscribe_to_thread("res-1", thread)
        await (await tl.send_message("check my inbox", agent_id="inbox-agent", resource_id="res-1",
                                     thread_id=thread)).accepted
        # the low notification's idle summary may reach the thread as a run of its own
        # (start, data-signal, finish) before the message's run: read runs until the tools ran
        chunks: list[dict] = []
        while not any(c["type"] == "tool-result" for c in chunks):
            chunks += await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
    results = [c["payload"]["result"] for c in chunks if c["type"] == "tool-result"]
    assert [r["id"] for r in results[0]["records"]] == [rid]
    assert results[1]["payload"] == {"sha": "abc"} and results[1]["summary"] == "deploy done"
    assert results[2:] == [{"updated": True, "status": s} for s in ("seen", "archived", "dismissed")]
    rec = await _record(cluster.dsn, rid)
    assert rec["status"] == "dismissed" and rec["seen_at"] and rec["archived_at"] and rec["dismissed_at"]

"""B12: a message sent right after an abort (in one burst: abort, ``send_message`` "m" with ``if_active
deliver``, ``queue_message`` "q") is never swallowed by the cancelled run: "m" starts (or joins)
the next run, "q" is answered after it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from tests.e2e.helpers import USER_AUTHORED, kept_chunks, rows, wait_idle
from threadline.client import ThreadlineClient
from threadline.events.ingress import AbortRequest
from threadline.testing import model_script as ms
from threadline.testing.harness import wait_file

FM = "threadline-b12"


def _user_texts(body: dict[str, Any]) -> list[str]:
    out = []
    for m in body["messages"]:
        if m["role"] == "user":
            c = m["content"]
            out.append(c if isinstance(c, str) else " ".join(p.get("text", "") for p in c if isinstance(p, dict)))
    return out


def _assistant_texts(body: dict[str, Any]) -> list[str]:
    return [m.get("content") or "" for m in body["messages"] if m["role"] == "assistant"]


async def _burst(tl: ThreadlineClient, thread: str) -> tuple[Any, Any, Any]:
    """abort, send_message "m" (deliver when active), queue_message "q": one producer, back to back."""
    abort = AbortRequest(agent_id="b12", resource_id="res-1", thread_id=thread)
    aborted = tl.transport.replies.expect(abort.event_id, "aborted")
    await tl.publish(abort)
    m = await tl.send_message("m", agent_id="b12", resource_id="res-1", thread_id=thread,
                              if_active={"behavior": "deliver"})
    q = await tl.queue_message("q", agent_id="b12", resource_id="res-1", thread_id=thread)
    return aborted, m, q


async def _case(settings, model, cluster, thread: str, first: ms.Script, when: Any) -> dict[str, Any]:
    """Wake R with "start" (``first`` answers it), wait for ``when(chunks)``, publish the burst,
    collect R, R2 ("m") and R3 ("q")."""
    model.queue([first, ms.text("answer m"), ms.text("answer q")], model=FM)
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        start = await (await tl.send_message("start", agent_id="b12", resource_id="res-1", thread_id=thread)).accepted
        r = start.run_id
        seen: list[dict[str, Any]] = []

        async def until() -> None:
            async for c in sub.stream:
                seen.append(c)
                if await when(seen):
                    return

        await asyncio.wait_for(until(), 60)
        aborted, m_sent, q_sent = await _burst(tl, thread)
        m_acc, q_acc, abort_reply = await m_sent.accepted, await q_sent.accepted, await asyncio.wait_for(aborted, 30)
        seen += await _until_three_runs_finish(sub, seen)
        await sub.unsubscribe()
    return {"r": r, "chunks": seen, "m": m_acc, "q": q_acc, "aborted": abort_reply.aborted}


async def _until_three_runs_finish(sub: Any, seen: list[dict[str, Any]], timeout_s: float = 120) -> list[dict[str, Any]]:
    """More chunks until three runs (R, R2, R3) have a ``finish``: a live subscriber may also see the
    ``finish`` of an attempt declared dead afterwards (``kept_chunks`` drops it)."""
    more: list[dict[str, Any]] = []

    async def pump() -> None:
        async for c in sub.stream:
            more.append(c)
            if len({x["runId"] for x in seen + more if x["type"] == "finish"}) >= 3:
                return

    if len({x["runId"] for x in seen if x["type"] == "finish"}) < 3:
        await asyncio.wait_for(pump(), timeout_s)
    return more


def _runs(chunks: list[dict[str, Any]]) -> list[str]:
    order: list[str] = []
    for c in chunks:
        if c["runId"] not in order:
            order.append(c["runId"])
    return order


def _finish(chunks: list[dict[str, Any]], run_id: str) -> str:
    done = [c for c in kept_chunks(chunks) if c["runId"] == run_id and c["type"] == "finish"]
    assert len(done) == 1, f"run {run_id}: {len(done)} finish chunks"
    return done[0]["payload"]["stepResult"]["reason"]


def _text(chunks: list[dict[str, Any]], run_id: str) -> str:
    return "".join(c["payload"]["text"] for c in kept_chunks(chunks) if c["runId"] == run_id and c["type"] == "text-delta")


async def _check(cluster, model, thread: str, out: dict[str, Any], *, r_may_finish: bool = False) -> None:
    chunks, r = out["chunks"], out["r"]
    runs = _runs(chunks)
    assert len(runs) == 3 and runs[0] == r, runs
    r2, r3 = runs[1], runs[2]
    if r_may_finish and not out["aborted"]:
        assert _finish(chunks, r) == "stop"
    else:
        assert out["aborted"] is True and _finish(chunks, r) == "abort"
    assert "answer m" not in _text(chunks, r)
    # "m" answered exactly once, by R2 != R; "q" after it, by R3
    assert _finish(chunks, r2) == "stop" and _text(chunks, r2) == "answer m"
    assert _finish(chunks, r3) == "stop" and _text(chunks, r3) == "answer q"
    requests = model.requests(model=FM)
    assert len(requests) == 3
    m_body, q_body = requests[1]["body"], requests[2]["body"]
    assert _user_texts(m_body)[-1] == "m" and _user_texts(m_body).count("m") == 1
    streamed = "".join(c["payload"]["text"] for c in chunks if c["runId"] == r and c["type"] == "text-delta")
    if streamed and _finish(chunks, r) == "abort":  # no partial assistant text of the aborted R
        assert not any(streamed.strip() in t or t.strip() in streamed for t in _assistant_texts(m_body) if t.strip())
    assert _user_texts(q_body)[-1] == "q"
    signals = await rows(cluster.dsn, "SELECT id, status, run_id, consumed_by_run, payload FROM signals "
                                      "WHERE thread_id = $1 ORDER BY seq", thread)
    m_sig = next(s for s in signals if s["id"] == out["m"].signal_id)
    q_sig = next(s for s in signals if s["id"] == out["q"].signal_id)
    assert (m_sig["status"], m_sig["consumed_by_run"]) == ("consumed", r2), dict(m_sig)
    assert (q_sig["status"], q_sig["consumed_by_run"]) == ("consumed", r3), dict(q_sig)
    assert not [s for s in signals if s["status"] == "pending"], [dict(s) for s in signals]  # none left to R
    users = await rows(cluster.dsn, f"SELECT id, content FROM messages WHERE thread_id = $1 AND {USER_AUTHORED}", thread)
    assert len({u["id"] for u in users}) == len(users) == 3  # start, m, q: none duplicated
    result = await rows(cluster.dsn, "SELECT text FROM runs WHERE run_id = $1", r)
    assert "answer m" not in (result[0]["text"] or "")
    assert await wait_idle(cluster.dsn, thread)


async def _deltas(n: int, seen: list[dict[str, Any]]) -> bool:
    return sum(c["type"] == "text-delta" for c in seen) >= n


async def test_b12a_message_after_an_abort_mid_stream_starts_the_next_run(services, settings, model, cluster):
    thread = f"th-b12-{uuid.uuid4().hex[:6]}"
    first = ms.Script(chunks=[f"c{i} " for i in range(40)], chunk_delay=0.1)

    async def third_delta(seen: list[dict[str, Any]]) -> bool:
        return await _deltas(3, seen)

    out = await _case(settings, model, cluster, thread, first, third_delta)
    await _check(cluster, model, thread, out)


async def test_b12b_message_after_an_abort_in_the_tool_phase_starts_the_next_run(services, settings, model, cluster):
    thread = f"th-b12-{uuid.uuid4().hex[:6]}"
    first = ms.tool_calls(ms.tool_call("sleep_tool", {"seconds": 5}, id="s1"))

    async def in_tool(seen: list[dict[str, Any]]) -> bool:
        if any(c["type"] == "tool-call" for c in seen):
            await asyncio.sleep(0.5)  # the tool is running
            return True
        return False

    out = await _case(settings, model, cluster, thread, first, in_tool)
    await _check(cluster, model, thread, out)
    assert not any(c["type"] == "tool-result" and c["runId"] == out["r"] for c in out["chunks"])


async def test_b12c_message_while_the_step_result_is_being_written(services, settings, model, cluster, tmp_path: Path):
    thread = f"th-b12-{uuid.uuid4().hex[:6]}"
    pause_file = tmp_path / "paused"
    services.stop("processor_worker-1")  # the armed worker runs every step
    services.start("processor_worker", "processor_worker-b12", THREADLINE_PAUSE_POINTS="before_step_result_write",
                   THREADLINE_PAUSE_FILE=str(pause_file), THREADLINE_PAUSE_SECONDS="2")

    async def held(seen: list[dict[str, Any]]) -> bool:
        if not any(c["type"] == "step-finish" for c in seen):
            return False
        await asyncio.to_thread(wait_file, pause_file, "before_step_result_write", 30)
        return True

    try:
        out = await _case(settings, model, cluster, thread, ms.text("all of R"), held)
    finally:
        services.stop("processor_worker-b12")
        services.start("processor_worker", "processor_worker-1")
    await _check(cluster, model, thread, out, r_may_finish=True)

"""Case B07 (docs/cases.md): a stalled model stream fails the run with kind ``timeout`` after the
per-read idle limit (``THREADLINE_MODEL_TIMEOUT_S``), while a slow but steady one is never cut
off; an abort during a stall closes the model call at once."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import orjson
import pytest

from tests.e2e.helpers import rows, run_row, wait_idle
from tests.e2e.records import read_lifecycle
from tests.e2e.stream_paths import only_worker
from threadline.client import ThreadlineClient

IDLE_S = 3
SLACK_S = 4  # a shared, loaded test machine: process scheduling and Kafka round trips
STALL = {"chunks": ["a", "b", "c", "d", "e"], "fail": "stall", "fail_after": 3, "stall_seconds": 3600}
WORKERS = ("processor_worker-b07-1", "processor_worker-b07-2")


async def _follow(settings, agent: str, thread: str, *, on_chunk=None, timeout_s: float = 60):
    """Send a message on a fresh thread; return (run id, chunks with their arrival times)."""
    seen: list[tuple[float, dict[str, Any]]] = []
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        run_id = (await (await tl.send_message("go", agent_id=agent, resource_id="res-1",
                                               thread_id=thread)).accepted).run_id

        async def pump() -> None:
            async for chunk in sub.stream:
                seen.append((time.time(), chunk))
                if on_chunk is not None:
                    await on_chunk(chunk, sub)
                if chunk["type"] == "finish":
                    return

        try:
            await asyncio.wait_for(pump(), timeout_s)
        except TimeoutError:
            raise AssertionError(f"no finish; saw {[c['type'] for _, c in seen]}") from None
        await sub.unsubscribe()
    return run_id, seen


async def _lifecycle(cluster, thread: str) -> list[str]:
    return [e["type"] for e in await read_lifecycle(cluster.bootstrap, f"{cluster.prefix}.lifecycle", thread_id=thread)]


async def _closed_by_client(model, name: str, timeout_s: float = 10) -> dict[str, Any]:
    """The model call's journal entry once the fake server saw the connection end."""
    deadline = time.monotonic() + timeout_s
    while True:
        entry = model.requests(model=name)[-1]
        if entry.get("closed_by") or time.monotonic() > deadline:
            assert entry.get("closed_by") == "client", entry.get("closed_by")
            return entry
        await asyncio.sleep(0.2)


async def test_b07f_abort_during_a_stall_closes_the_call_at_once(services, settings, model, cluster):
    """(f) on the suite's worker, whose idle limit (120 s) is far away, as the case's 60 s is."""
    name, thread = "threadline-b07", f"th-{uuid.uuid4().hex[:8]}"
    model.clear(model=name)
    model.queue([STALL], model=name)
    asked: list[float] = []

    async def abort_in_stall(chunk, sub) -> None:
        if chunk["type"] == "text-delta" and chunk["payload"]["text"] == "c":
            await asyncio.sleep(2)  # 2 s into the stall
            asked.append(time.time())
            assert await sub.abort() is True

    run_id, seen = await _follow(settings, "B07", thread, on_chunk=abort_in_stall)
    finished_at, finish = seen[-1]
    assert finish["payload"]["stepResult"]["reason"] == "abort"
    assert finished_at - asked[0] <= 2 + SLACK_S
    entry = await _closed_by_client(model, name)
    assert entry["closed_at"] - asked[0] <= 2 + SLACK_S
    assert (await run_row(cluster.dsn, run_id))["status"] == "aborted"
    assert "run_aborted" in await _lifecycle(cluster, thread)


@pytest.fixture(scope="module")
def idle_limited(services):
    """Two processor-workers with a 3 s per-read idle limit, in place of the suite's worker."""
    with only_worker(services, WORKERS, THREADLINE_MODEL_TIMEOUT_S=str(IDLE_S)):
        yield


@pytest.mark.parametrize("variant", ["a", "b", "c"])
async def test_b07_a_stalled_stream_fails_with_timeout_and_frees_the_thread(idle_limited, services, settings,
                                                                           model, cluster, variant):
    name, thread = "threadline-b07", f"th-{uuid.uuid4().hex[:8]}"
    script = {"a": {"text": "never", "delay": 3600}, "b": {"text": "late", "ttft": 30}, "c": STALL}[variant]
    model.clear(model=name)
    model.queue([script], model=name)
    run_id, seen = await _follow(settings, "B07", thread)
    chunks = [c for _, c in seen]
    errors = [c["payload"]["error"] for c in chunks if c["type"] == "error"]
    assert [e["kind"] for e in errors] == ["timeout"] and errors[0]["retryable"] is True
    assert chunks[-1]["payload"]["stepResult"]["reason"] == "error"
    texts = [c["payload"]["text"] for c in chunks if c["type"] == "text-delta"]
    assert texts == (["a", "b", "c"] if variant == "c" else [])
    requests = model.requests(model=name)
    assert len(requests) == 1
    last_byte = max([t for t, c in seen if c["type"] == "text-delta"], default=requests[0]["time"])
    assert seen[-1][0] - last_byte <= IDLE_S + 3 + SLACK_S
    await _closed_by_client(model, name)
    assert (await run_row(cluster.dsn, run_id))["status"] == "failed"
    stored = await rows(cluster.dsn, "SELECT role, content FROM messages WHERE run_id = $1 ORDER BY position", run_id)
    # Mastra's stored shape (decision 170): the input, then what streamed ("abc") and the error part
    assert [r["role"] for r in stored] == ["signal", "assistant"]  # its sendMessage input (role signal, as Mastra's)
    answer = stored[1]["content"] if isinstance(stored[1]["content"], dict) else orjson.loads(stored[1]["content"])
    assert [p["type"] for p in answer["parts"]] == (["text", "error"] if variant == "c" else ["error"])
    assert "run_failed" in await _lifecycle(cluster, thread)
    assert await wait_idle(cluster.dsn, thread)
    model.queue([{"text": "again"}], model=name)
    async with ThreadlineClient(settings) as tl:  # the lease was released: the next message wakes a run
        accepted = await (await tl.send_message("next", agent_id="B07", resource_id="res-1",
                                                thread_id=thread)).accepted
    assert accepted.action == "wake"
    assert (await run_row(cluster.dsn, accepted.run_id, settle_s=30))["status"] == "finished"


async def test_b07d_an_error_processor_retries_the_timeout(idle_limited, services, settings, model, cluster):
    name, thread = "threadline-b07-rt", f"th-{uuid.uuid4().hex[:8]}"
    model.clear(model=name)
    model.queue([STALL, {"text": "complete", "finish_reason": "stop"}], model=name)
    run_id, seen = await _follow(settings, "B07-rt", thread)
    chunks = [c for _, c in seen]
    types = [c["type"] for c in chunks]
    discarded = [c["payload"] for c in chunks if c["type"] == "attempt-discarded"]
    assert len(discarded) == 1 and (discarded[0]["step"], discarded[0]["attempt"]) == (0, 1)
    deltas = [c["payload"]["text"] for c in chunks if c["type"] == "text-delta"]
    at = types.index("attempt-discarded")
    assert [c["payload"]["text"] for c in chunks[:at] if c["type"] == "text-delta"] == ["a", "b", "c"]
    assert "".join(deltas[3:]) == "complete"
    assert chunks[-1]["payload"]["stepResult"]["reason"] == "stop" and "error" not in types
    assert len(model.requests(model=name)) == 2
    row = await run_row(cluster.dsn, run_id)
    assert row["state"]["processor_state"]["rt"]["kinds"] == ["timeout"]
    stored = await rows(cluster.dsn, "SELECT content FROM messages WHERE run_id = $1 AND role = 'assistant'", run_id)
    assert [p["text"] for m in stored for p in m["content"]["parts"] if p["type"] == "text"] == ["complete"]


async def test_b07e_a_slow_steady_stream_is_not_cut_off(idle_limited, services, settings, model, cluster):
    name, thread = "threadline-b07", f"th-{uuid.uuid4().hex[:8]}"
    words = [f"w{i} " for i in range(12)]
    model.clear(model=name)
    model.queue([{"chunks": words, "chunk_delay": 2, "finish_reason": "stop"}], model=name)
    run_id, seen = await _follow(settings, "B07", thread, timeout_s=90)
    chunks = [c for _, c in seen]
    types = [c["type"] for c in chunks]
    assert "error" not in types and "attempt-discarded" not in types
    assert [c["payload"]["text"] for c in chunks if c["type"] == "text-delta"] == words
    assert chunks[-1]["payload"]["stepResult"]["reason"] == "stop"
    assert seen[-1][0] - seen[0][0] >= 20  # it did stream for ~24 s
    row = await run_row(cluster.dsn, run_id)
    assert (row["status"], row["attempt"]) == ("finished", 1)  # one attempt: no takeover
    assert not await rows(cluster.dsn, "SELECT 1 FROM run_recoveries WHERE run_id = $1", run_id)
    assert len(model.requests(model=name)) == 1

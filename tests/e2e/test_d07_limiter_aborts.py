"""D07 (a) at the e2e cluster's limit (``openai/threadline-limited``: 300 requests per
minute over every worker, evenly spaced — one place every 0.2 s; tests/e2e/conftest.py): runs
aborted while they wait in the limiter end at once, never call the model, and give their places
back, so a run started after the aborts is not held behind them (decision 197)."""

from __future__ import annotations

import asyncio
import time
import uuid

from tests.e2e.helpers import collect_run, content, run_stream
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms

FM = "threadline-limited"


def _asked(model, word: str) -> list[dict]:
    return [r for r in model.requests(model=FM) if word in str(r["body"].get("messages"))]


async def test_d07_a_aborted_waits_give_their_places_back(services, settings, model):
    tag = uuid.uuid4().hex[:6]
    threads = [f"th-d07-{tag}-{i}" for i in range(40)]  # places 0 … 7.8 s
    model.queue([ms.text("ok", times=60)], model=FM)
    async with ThreadlineClient(settings) as tl:
        subs = [await tl.subscribe_to_thread("res-1", t) for t in threads]
        collected = [asyncio.create_task(collect_run(s, timeout_s=60)) for s in subs]
        for i, t in enumerate(threads):
            await tl.stream(f"go {tag} {i}.", agent_id="limited", resource_id="res-1", thread_id=t)
        deadline = time.monotonic() + 30
        while len(_asked(model, tag)) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        called = str([r["body"]["messages"] for r in _asked(model, tag)])
        waiting = [t for i, t in enumerate(threads) if f"go {tag} {i}." not in called]
        aborted_at = time.monotonic()
        await asyncio.gather(*(tl.abort(resource_id="res-1", thread_id=t) for t in waiting))
        results = await asyncio.gather(*collected)
        ended = time.monotonic() - aborted_at
        for s in subs:
            await s.unsubscribe()
    started = time.monotonic()
    _, chunks = await run_stream(settings, "limited", f"late {tag}")  # T31
    took = time.monotonic() - started
    assert content(chunks)[-1] == ("finish", "stop")
    finished = {t: content(c)[-1] for t, c in zip(threads, results, strict=True)}
    aborted = [t for t in waiting if finished[t] == ("finish", "abort")]
    assert len(aborted) >= len(waiting) - 3  # a few may have been called between the look and the abort
    assert ended <= 5.0  # every aborted run ended within seconds (not at its place, up to 7.8 s on)
    # an aborted run reached the model only when its call had begun before the abort landed
    seen = str([r["body"]["messages"] for r in _asked(model, tag)])
    assert sum(f"go {tag} {threads.index(t)}." in seen for t in aborted) <= 3
    # the late run did not wait for the aborted runs' places
    assert took <= 3.0, f"the late run took {took:.2f} s (its place counted the aborted runs' places)"


async def test_d07_c_an_abort_ends_a_retry_after_sleep(services, settings, model):
    """(c), scaled to the e2e cluster's 5 s longest wait: a run sleeping in the model layer's
    ``Retry-After`` backoff ends ``finish {abort}`` at once, and its retry never goes out."""
    abortable = "threadline-abortable"
    model.queue([ms.rate_limit(retry_after=4), ms.text("never")], model=abortable)
    thread = f"th-d07c-{uuid.uuid4().hex[:6]}"
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        collected = asyncio.create_task(collect_run(sub, timeout_s=30))
        await tl.stream("go", agent_id="abortable", resource_id="res-1", thread_id=thread)
        deadline = time.monotonic() + 30
        while not model.requests(model=abortable) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # the 429 is answered; the run sleeps before its retry
        aborted_at = time.monotonic()
        assert await tl.abort(resource_id="res-1", thread_id=thread) is True
        chunks = await collected
        ended = time.monotonic() - aborted_at
        await sub.unsubscribe()
    assert content(chunks)[-1] == ("finish", "abort")
    assert ended <= 2.0, ended
    await asyncio.sleep(max(0.0, 4.6 - (time.monotonic() - aborted_at)))  # past the retry's due time
    assert len(model.requests(model=abortable)) == 1  # FM never saw the retry

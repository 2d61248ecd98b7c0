"""D09: sub-agent trees. A self-delegating agent, or two agents delegating to each other, stop at
the depth limit (``THREADLINE_SUB_AGENT_MAX_DEPTH``, 3 on the test's worker): the call made at
depth 3 is a ``tool-error`` naming the limit and creates no run, so 1 + 3 runs exist and the root
ends ``stop`` (decision 219). Aborting the root aborts every level below it within seconds;
aborting only the grandchild gives its parent a tool error and the tree goes on; a long thread id
still gives child thread ids a client can name, at every depth (decision 219)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from tests.e2e.helpers import collect_run, content, rows, swapped_service, wait_idle
from tests.e2e.records import read_all
from threadline.client import ThreadlineClient
from threadline.runtime.sub_agents import child_ids
from threadline.testing import model_script as ms
from threadline.topics import Topics

MAX_DEPTH = "3"
LIMIT = "sub-agent depth limit 3 reached"


def _call_id(level: int, long_ids: bool) -> str:
    """The call id of each level's sub-agent call: ``d0``, ``d1``, … or, as providers make them,
    ``call_0_`` and 24 more characters."""
    return f"call_{level}_{'q' * 24}" if long_ids else f"d{level}"


def _chain(thread: str, run_keys: list[str], *, long_ids: bool = False) -> list[str]:
    """The thread of each level: the root's, then each child's."""
    threads = [thread]
    for level, key in enumerate(run_keys):
        threads.append(child_ids("unused", threads[-1], f"agent-{key}", _call_id(level, long_ids))[1])
    return threads


async def _script(model: Any, threads: list[str], keys: list[str], *, last: Any = None, long_ids: bool = False) -> None:
    """Each level's step 0 calls the next level's sub-agent; step 1 answers. The deepest level's
    step 0 is ``last`` (default: one more call, refused by the limit)."""
    for level, thread in enumerate(threads):
        call = ms.tool_calls(ms.tool_call(f"agent-{keys[level]}", {"prompt": "deeper"}, id=_call_id(level, long_ids)))
        first = last if level == len(threads) - 1 and last is not None else call
        await model.aqueue([first], model=f"threadline-d09-{thread}-s0")
        await model.aqueue([ms.text(f"level {level} done")], model=f"threadline-d09-{thread}-s1")


async def _runs_of(dsn: str, threads: list[str]) -> list[Any]:
    return await rows(dsn, "SELECT run_id, thread_id, status, parent_run_id FROM runs WHERE thread_id = ANY($1::text[])",
                      threads)


def _reason(finish: dict[str, Any]) -> str | None:
    return (finish.get("payload") or {}).get("stepResult", {}).get("reason")


async def _root(tl: ThreadlineClient, agent: str, thread: str) -> tuple[Any, str]:
    sub = await tl.subscribe_to_thread("res-1", thread)
    run_id = (await (await tl.stream("start", agent_id=agent, resource_id="res-1", thread_id=thread)).accepted).run_id
    return sub, run_id


async def test_d09_recursion_and_a_cycle_stop_at_the_depth_limit(services, settings, model, cluster):
    tag = uuid.uuid4().hex[:6]
    rec = _chain(f"th-d09a-{tag}", ["self"] * 3)  # depths 0..3
    cyc = _chain(f"th-d09b-{tag}", ["c", "b", "c"])
    await _script(model, rec, ["self"] * 4)
    await _script(model, cyc, ["c", "b", "c", "b"])
    with swapped_service(services, "processor_worker", f"d09{tag}", THREADLINE_SUB_AGENT_MAX_DEPTH=MAX_DEPTH):
        async with ThreadlineClient(settings) as tl:
            (sub_a, _), (sub_b, _) = await _root(tl, "d09-rec", rec[0]), await _root(tl, "d09-b", cyc[0])
            chunks_a, chunks_b = await asyncio.gather(collect_run(sub_a, timeout_s=120),
                                                      collect_run(sub_b, timeout_s=120))
            await sub_a.unsubscribe()
            await sub_b.unsubscribe()
    for threads, chunks in ((rec, chunks_a), (cyc, chunks_b)):
        runs = await _runs_of(cluster.dsn, [*threads, f"{threads[-1]}.never"])
        assert len(runs) == 4 and {r["thread_id"] for r in runs} == set(threads), runs  # 1 + 3, none deeper
        assert all(r["status"] == "finished" for r in runs), runs
        deepest = next(r for r in runs if r["thread_id"] == threads[-1])
        assert not await rows(cluster.dsn, "SELECT 1 FROM runs WHERE parent_run_id = $1", deepest["run_id"])
        [refused] = await rows(cluster.dsn, "SELECT error FROM tool_calls WHERE run_id = $1", deepest["run_id"])
        assert refused["error"] == LIMIT
        root = [c for c in chunks if c["runId"] == next(r["run_id"] for r in runs if r["thread_id"] == threads[0])]
        assert content(root)[-1] == ("finish", "stop")
        for thread in threads:
            assert await wait_idle(cluster.dsn, thread, timeout_s=15)


async def test_d09_aborting_the_root_aborts_every_level_below_it(services, settings, model, cluster):
    tag = uuid.uuid4().hex[:6]
    threads = _chain(f"th-d09c-{tag}", ["self"] * 2)  # root, child, grandchild
    slow = ms.text(" ".join(f"w{i}" for i in range(60)), chunk_delay=0.5)
    await _script(model, threads, ["self"] * 3, last=slow)
    async with ThreadlineClient(settings) as tl:
        sub, root_id = await _root(tl, "d09-rec", threads[0])
        deadline = time.monotonic() + 60
        while not model.requests(model=f"threadline-d09-{threads[2]}-s0") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # the grandchild streams
        aborted_at = time.monotonic()
        assert await tl.abort(resource_id="res-1", thread_id=threads[0]) is True
        statuses: list[str] = []
        while time.monotonic() - aborted_at < 3.0:
            statuses = [r["status"] for r in await _runs_of(cluster.dsn, threads)]
            if len(statuses) == 3 and all(s == "aborted" for s in statuses):
                break
            await asyncio.sleep(0.1)
        took = time.monotonic() - aborted_at
        await sub.unsubscribe()
    assert statuses == ["aborted"] * 3 and took <= 3.0, (statuses, took)
    for thread in threads:
        assert await wait_idle(cluster.dsn, thread, timeout_s=5), thread  # no lease held
    await asyncio.sleep(max(0.0, aborted_at + 2.0 - time.monotonic()))
    asked = {t: len(model.requests(model=f"threadline-d09-{t}-s1")) for t in threads}
    await asyncio.sleep(2.0)  # nothing asks the model for any level after the abort + 2 s
    assert {t: len(model.requests(model=f"threadline-d09-{t}-s1")) for t in threads} == asked
    assert asked[threads[2]] == 0  # the grandchild never reached its next step
    topics = Topics(settings.topic_prefix)
    assert all(len(topics.chunks("res-1", t)) <= 249 for t in threads)
    runs = {r["thread_id"]: r["run_id"] for r in await _runs_of(cluster.dsn, threads)}
    assert runs[threads[0]] == root_id
    for level in (1, 2):  # each child's finish {abort} on its own topic, and nested in its parent's
        own = await read_all(settings.kafka_bootstrap, [topics.chunks("res-1", threads[level])])
        parents = await read_all(settings.kafka_bootstrap, [topics.chunks("res-1", threads[level - 1])])
        child_id = runs[threads[level]]
        assert [_reason(c) for c in own if c["type"] == "finish" and c["runId"] == child_id] == ["abort"]
        nested = [c["payload"]["output"] for c in parents if c["type"] == "tool-output" and c["runId"] == child_id]
        assert [_reason(c) for c in nested if c["type"] == "finish"] == ["abort"], (level, [c["type"] for c in nested])


async def test_d09_aborting_only_the_grandchild_lets_the_tree_go_on(services, settings, model, cluster):
    tag = uuid.uuid4().hex[:6]
    threads = _chain(f"th-d09d-{tag}-" + "x" * 185, ["self"] * 2, long_ids=True)  # (e): a 200-character root
    assert len(threads[0]) == 200 and all(len(t) <= 256 for t in threads)
    assert len(f"{threads[1]}.agent-self.{_call_id(1, True)}") > 256  # the grandchild's id was shortened
    slow = ms.text(" ".join(f"g{i}" for i in range(60)), chunk_delay=0.5)
    await _script(model, threads, ["self"] * 3, last=slow, long_ids=True)
    async with ThreadlineClient(settings) as tl:
        sub, root_id = await _root(tl, "d09-rec", threads[0])
        deadline = time.monotonic() + 60
        while not model.requests(model=f"threadline-d09-{threads[2]}-s0") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        assert await tl.abort(resource_id="res-1", thread_id=threads[2]) is True  # the grandchild's own thread
        chunks = await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
        for thread in threads:  # (e) every child thread is readable by its id
            assert await tl.get_thread(resource_id="res-1", thread_id=thread) is not None, thread
    runs = {r["thread_id"]: r for r in await _runs_of(cluster.dsn, threads)}
    assert [runs[t]["status"] for t in threads] == ["finished", "finished", "aborted"]
    [child_call] = await rows(cluster.dsn, "SELECT error FROM tool_calls WHERE run_id = $1",
                              runs[threads[1]]["run_id"])
    assert child_call["error"] and "aborted" in child_call["error"]  # the child's call of the grandchild
    root = [c for c in chunks if c["runId"] == root_id]
    assert content(root)[-1] == ("finish", "stop")
    # the root's stored history and what it sent the model hold none of the descendants' messages
    stored = str([m["content"] for m in await rows(cluster.dsn, "SELECT content FROM messages WHERE run_id = $1",
                                                    root_id)])
    [asked] = model.requests(model=f"threadline-d09-{threads[0]}-s1")
    sent = str(asked["body"]["messages"])
    assert "g0 g1" not in stored and "g0 g1" not in sent  # the grandchild's streamed text
    assert "level 1 done" in sent  # the child's answer, as the root's tool result
    assert str(runs[threads[1]]["run_id"]) not in sent  # the model reads the answer only (decision 127)
    topics = Topics(settings.topic_prefix)
    assert all(len(topics.chunks("res-1", t)) <= 249 for t in threads)

"""An agent's scorers run after its run finished, off the run's path (decision
71): a function scorer and an LLM judge (the fake model answers it) at sampling 1 each store one
score and announce it on the lifecycle topic; scorers sampled at 0 store nothing."""

from __future__ import annotations

import asyncio
import uuid

from tests.e2e.records import read_lifecycle
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms

RES = "res-scores"


async def _scores(tl: ThreadlineClient, run_id: str, count: int, timeout_s: float = 30.0) -> list[dict]:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        found = await tl.scores(run_id)
        if len(found) >= count or asyncio.get_running_loop().time() > deadline:
            return found
        await asyncio.sleep(0.1)


async def test_scorers_store_once_and_announce(services, settings, model, cluster):
    thread = f"th-sc-{uuid.uuid4().hex[:8]}"
    memory = {"memory": {"resource": RES, "thread": thread}}
    await model.aqueue([ms.text("skipped answer")], model="threadline-unsampled")
    await model.aqueue([ms.text("hello world")], model="threadline-scored")
    await model.aqueue([ms.text('Verdict: {"score": 0.25, "reason": "terse"}')], model="threadline-judge")
    question = f"greet me {thread}"
    async with ThreadlineClient(settings) as tl:
        skipped = await tl.agent("unsampled").generate("no scores please", memory)
        result = await tl.agent("scored").generate(question, memory)
        assert result.text == "hello world"
        found = await _scores(tl, result.run_id, 2)
        # the same thread's lifecycle records are handled in order: the unsampled run was seen first
        assert await tl.scores(skipped.run_id) == []
    by_name = {s["scorer"]: s for s in found}
    assert sorted(by_name) == ["judge", "length"]  # "never" (sampling 0) was not queued
    assert by_name["length"]["status"] == "done" and by_name["length"]["score"] == 1.0
    assert by_name["length"]["reason"] == f"11 chars for {question!r}"
    assert (by_name["judge"]["score"], by_name["judge"]["reason"]) == (0.25, "terse")
    (asked,) = [r for r in await model.arequests(model="threadline-judge")
                if question in r["body"]["messages"][-1]["content"]]
    assert asked["body"]["messages"][0] == {"role": "system", "content": "Rate the answer."}
    assert "hello world" in asked["body"]["messages"][-1]["content"]
    events = await read_lifecycle(cluster.bootstrap, f"{cluster.prefix}.lifecycle")
    mine = [e for e in events if e.get("thread_id") == thread and e["type"] == "score"]
    assert sorted((e["run_id"], e["score"]["scorer"], e["score"]["score"]) for e in mine) == [
        (result.run_id, "judge", 0.25), (result.run_id, "length", 1.0)]
    finished = [i for i, e in enumerate(events) if e.get("run_id") == result.run_id and e["type"] == "run_finished"]
    assert finished and all(events.index(e) > finished[0] for e in mine)

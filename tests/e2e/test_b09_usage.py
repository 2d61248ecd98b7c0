"""Case B09 (docs/cases.md): usage read from every chunk shape (a finish chunk, a usage chunk whose
``choices`` is ``[{"index":0,"delta":{}}]``, a ``choices: []`` chunk), with cached and reasoning
tokens, and summed over every billed response of the run, the discarded attempt included
(docs/decisions.md §20, §21) — on both stream paths."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.e2e.helpers import collect_run, run_row
from tests.e2e.stream_paths import PATHS, delta, on_path, raw
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms

MODEL = "threadline-b09"
ADD = {"index": 0, "id": "a1", "type": "function", "function": {"name": "add", "arguments": '{"a":2,"b":3}'}}
FM = [
    raw(delta({"role": "assistant", "tool_calls": [ADD]}), delta({}, "tool_calls"),
        {"choices": [{"index": 0, "delta": {}}], "usage": {
            "prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020,
            "prompt_tokens_details": {"cached_tokens": 800}, "completion_tokens_details": {"reasoning_tokens": 5}}}),
    ms.text("DRAFT", usage={"prompt_tokens": 1100, "completion_tokens": 3}),
    ms.text("Five.", usage={"prompt_tokens": 1120, "completion_tokens": 4,
                            "prompt_tokens_details": {"cached_tokens": 1000}}, usage_on_finish=True),
]
TOTAL = {"inputTokens": 3220, "outputTokens": 27, "totalTokens": 3247, "cachedInputTokens": 1800, "reasoningTokens": 5}


@pytest.fixture(scope="module", params=sorted(PATHS))
def path(request, services):
    with on_path(services, request.param, "processor_worker-b09-wrapper") as chosen:
        yield chosen


def _integers(usage: dict) -> bool:
    return all(type(v) is int for v in usage.values())


async def test_b09_usage_from_every_shape_summed_over_every_billed_response(path, services, settings, model,
                                                                              cluster):
    model.clear(model=MODEL)
    model.queue(FM, model=MODEL)
    thread = f"th-{uuid.uuid4().hex[:8]}"
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        collecting = asyncio.ensure_future(collect_run(sub, timeout_s=60))
        result = await tl.generate("What is 2 + 3?", agent_id="B09", resource_id="res-1", thread_id=thread,
                                   timeout_s=60)
        chunks = await collecting
        await sub.unsubscribe()
    assert len(model.requests(model=MODEL)) == 3
    assert [c["payload"]["attempt"] for c in chunks if c["type"] == "attempt-discarded"] == [1]
    finishes = [c["payload"] for c in chunks if c["type"] == "step-finish"]
    # a chunk's usage is Mastra's (decisions.md#mastra-step-payloads): the counts, and the report as `raw`
    raws = [f["output"]["usage"].pop("raw") for f in finishes]
    assert raws[0]["inputTokens"] == {"total": 1000, "noCache": 200, "cacheRead": 800}
    assert raws[0]["outputTokens"] == {"total": 20, "text": 15, "reasoning": 5}
    assert finishes[0]["output"]["usage"] == {"inputTokens": 1000, "outputTokens": 20, "totalTokens": 1020,
                                              "cachedInputTokens": 800, "reasoningTokens": 5}
    # the step's usage is the accepted attempt's (the discarded attempt's step-finish, reason retry, has its own)
    assert finishes[-1]["output"]["usage"] == {"inputTokens": 1120, "outputTokens": 4, "totalTokens": 1124,
                                               "cachedInputTokens": 1000, "reasoningTokens": 0}
    assert finishes[-1]["output"]["text"] == "Five." and result.text == "Five."
    final = chunks[-1]
    assert final["type"] == "finish" and final["payload"]["finishReason"] == "stop"
    assert final["payload"]["output"]["usage"].pop("raw") == raws[-1]  # the last step's report, as in Mastra
    assert final["payload"]["output"]["usage"] == TOTAL  # the discarded attempt is billed too (§21)
    assert result.usage.pop("raw") == raws[-1]  # the result's usage has the last step's report too
    assert result.usage == TOTAL
    row = await run_row(cluster.dsn, result.run_id)
    assert row["usage"] == TOTAL
    assert all(_integers(u) for u in (result.usage, row["usage"], final["payload"]["output"]["usage"],
                                      *(f["output"]["usage"] for f in finishes)))

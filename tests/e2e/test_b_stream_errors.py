"""Stream errors end to end (docs/decisions.md §20), on both stream paths: a stream cut
off is ``stream_interrupted``, an empty or non-SSE ``200`` body is ``bad_response``, both
retryable, and error processors see those kinds; a stream that ends with ``[DONE]`` but no
finish reason is an answer, one whose body stops with neither is ``stream_interrupted`` (§180)."""

from __future__ import annotations

import pytest

from tests.e2e.helpers import run_row, run_stream
from tests.e2e.stream_paths import PATHS, delta, on_path, raw
from threadline.testing import model_script as ms

MODEL = "threadline-b07-rt"  # agent B07-rt: no model-level retries; its processor "rt" records the kinds
CASES = {
    "cut-off": (ms.mid_stream("disconnect", 2, chunks=["a", "b", "c"]), "stream_interrupted"),
    "ended-unsaid": (ms.mid_stream("truncate", 2, chunks=["a", "b", "c"]), "stream_interrupted"),
    "half-a-call": (raw(delta({"role": "assistant", "tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                                                     "function": {"name": "lookup", "arguments": "{\"id"}}]}),
                        done=False), "stream_interrupted"),
    "empty-body": ({"raw": "", "content_type": "text/event-stream"}, "bad_response"),
    "non-sse-body": ({"raw": '{"id": "x", "object": "chat.completion", "choices": []}',
                      "content_type": "application/json"}, "bad_response"),
}


@pytest.fixture(scope="module", params=sorted(PATHS))
def path(request, services):
    with on_path(services, request.param, "processor_worker-bse-wrapper") as chosen:
        yield chosen


@pytest.mark.parametrize("case", sorted(CASES))
async def test_stream_failures_have_their_kind_on_every_path(path, services, settings, model, cluster, case):
    script, kind = CASES[case]
    model.clear(model=MODEL)
    model.queue([script], model=MODEL)
    run_id, chunks = await run_stream(settings, "B07-rt", "go")
    errors = [c["payload"]["error"] for c in chunks if c["type"] == "error"]
    assert [(e["kind"], e["retryable"]) for e in errors] == [(kind, True)]
    assert chunks[-1]["payload"]["stepResult"]["reason"] == "error"
    row = await run_row(cluster.dsn, run_id)
    assert row["status"] == "failed"
    assert row["state"]["processor_state"]["rt"]["kinds"] == [kind]  # the error processor saw the kind
    assert not any(c["type"] == "tool-call" for c in chunks)  # a half-received call is never a call


async def test_a_stream_with_done_but_no_finish_reason_is_an_answer(path, services, settings, model, cluster):
    model.clear(model=MODEL)
    model.queue([raw(delta({"role": "assistant", "content": "All "}), delta({"content": "done."}))], model=MODEL)
    run_id, chunks = await run_stream(settings, "B07-rt", "go")
    assert not any(c["type"] == "error" for c in chunks)
    finish = [c["payload"] for c in chunks if c["type"] == "step-finish"][-1]
    assert finish["stepResult"]["reason"] == "stop" and finish["output"]["text"] == "All done."
    assert (await run_row(cluster.dsn, run_id))["status"] == "finished"

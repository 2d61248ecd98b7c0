"""Text that arrives in pieces, end to end (docs/decisions.md §181): a character the model's
stream cuts between two SSE events (UTF-16 halves, escaped) or two network reads (UTF-8 bytes)
is one character in the chunks a subscriber reads and in the step's answer, on both stream
paths."""

from __future__ import annotations

import pytest

from tests.e2e.helpers import run_row, run_stream
from tests.e2e.stream_paths import PATHS, on_path
from threadline.testing import model_script as ms

MODEL = "threadline-b07-rt"  # agent B07-rt: answers with the model's text
TEXT = "caf\u00e9 \U0001F600\U0001F601 \u4e2d\u6587 done"


@pytest.fixture(scope="module", params=sorted(PATHS))
def path(request, services):
    with on_path(services, request.param, "processor_worker-tip-wrapper") as chosen:
        yield chosen


@pytest.mark.parametrize("split", ["surrogates", "bytes"])
async def test_a_character_cut_in_two_is_one_character_for_the_subscriber(path, services, settings, model, cluster,
                                                                           split):
    model.clear(model=MODEL)
    model.queue([ms.text(TEXT, split=split)], model=MODEL)
    run_id, chunks = await run_stream(settings, "B07-rt", "go")
    deltas = [c["payload"]["text"] for c in chunks if c["type"] == "text-delta"]
    assert "".join(deltas) == TEXT and not any("\ufffd" in d for d in deltas)
    finish = [c["payload"] for c in chunks if c["type"] == "step-finish"][-1]
    assert finish["output"]["text"] == TEXT
    assert (await run_row(cluster.dsn, run_id))["status"] == "finished"

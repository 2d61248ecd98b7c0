"""A run ends exactly once: when a step already streamed its ``finish`` and then cannot store
its result (a non-transient fault: here the model's text holds U+0000, which PostgreSQL's
jsonb cannot store), the run fails — and the attempt that streamed the first ``finish`` is
declared dead before the failure's ``error`` + ``finish``, so subscribers see one ``finish``."""

from __future__ import annotations

import asyncio
import uuid

from tests.e2e.checker import Figures, check_stream, clean
from tests.e2e.faults import read_all
from tests.e2e.helpers import run_row, wait_idle
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms
from threadline.topics import Topics


async def test_a_step_that_cannot_store_its_result_after_finish_ends_with_one_finish(services, settings, model,
                                                                                     cluster):
    thread = f"th-onefinish-{uuid.uuid4().hex[:6]}"
    await model.aqueue([ms.text("a reply with a \u0000 in it")], model=f"threadline-chaos-{thread}-s0")
    async with ThreadlineClient(settings) as tl:
        run_id = (await (await tl.stream("hello", agent_id="chaos", resource_id="res-1",
                                         thread_id=thread)).accepted).run_id
    row = await run_row(cluster.dsn, run_id, settle_s=60)
    assert row["status"] == "failed", dict(row)
    assert await wait_idle(cluster.dsn, thread, timeout_s=30)
    await asyncio.sleep(1.0)  # nothing more is published after the run ended
    chunks = await read_all(settings.kafka_bootstrap, [Topics(settings.topic_prefix).chunks("res-1", thread)])
    fig = Figures()
    kept = clean(chunks, fig)[run_id]
    check_stream(run_id, kept, fig)
    assert not fig.problems, (fig.problems, [(c["type"], c["attempt"], c["seq"]) for c in chunks])
    assert [c["type"] for c in kept][-2:] == ["error", "finish"]
    assert [c["type"] for c in chunks].count("finish") == 2  # the first one is in the discarded attempt

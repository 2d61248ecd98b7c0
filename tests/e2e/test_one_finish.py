"""A run ends exactly once (decision 19): a run's ``finish`` is published only once its last
step is stored (it is queued in the outbox with the step's result), so when the step cannot be
stored (a non-transient fault: here a processor leaves a value in its state that is not JSON) the
run fails with ``error`` + ``finish`` and the topic holds one ``finish`` for it — no ``finish``
followed by a failure, not even in an attempt declared dead."""

from __future__ import annotations

import asyncio
import uuid

from tests.e2e.checker import Figures, check_stream, clean
from tests.e2e.faults import read_all
from tests.e2e.helpers import collect_run, run_row, wait_idle
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms
from threadline.topics import Topics


async def test_a_step_that_cannot_store_its_result_ends_with_one_finish(services, settings, model, cluster):
    thread = f"th-onefinish-{uuid.uuid4().hex[:6]}"
    await model.aqueue([ms.text("a reply that is streamed but cannot be stored")], model="threadline-unstorable")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        run_id = (await (await tl.stream("hello", agent_id="unstorable", resource_id="res-1",
                                         thread_id=thread)).accepted).run_id
        seen = await collect_run(sub)  # what a live subscriber sees: up to the first finish
        await sub.unsubscribe()
    row = await run_row(cluster.dsn, run_id, settle_s=60)
    assert row["status"] == "failed", dict(row)
    assert seen[-1]["type"] == "finish" and seen[-1]["payload"]["finishReason"] == "error", seen[-3:]
    assert await wait_idle(cluster.dsn, thread, timeout_s=30)
    await asyncio.sleep(1.0)  # nothing more is published after the run ended
    chunks = await read_all(settings.kafka_bootstrap, [Topics(settings.topic_prefix).chunks("res-1", thread)])
    fig = Figures()
    kept = clean(chunks, fig)[run_id]
    check_stream(run_id, kept, fig)
    assert not fig.problems, (fig.problems, [(c["type"], c["attempt"], c["seq"]) for c in chunks])
    assert [c["type"] for c in kept][-2:] == ["error", "finish"]
    assert [c["type"] for c in chunks].count("finish") == 1  # on the raw topic, not only after discards
    assert [c["seq"] for c in chunks] == list(range(len(chunks)))  # the held finish left no gap
    assert "attempt-discarded" not in [c["type"] for c in chunks]


async def test_a_finished_run_publishes_its_finish_once_it_is_stored(services, settings, model, cluster):
    thread = f"th-onefinish-ok-{uuid.uuid4().hex[:6]}"
    await model.aqueue([ms.text("fine")], model="threadline-plain")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        run_id = (await (await tl.stream("hello", agent_id="plain", resource_id="res-1",
                                         thread_id=thread)).accepted).run_id
        seen = await collect_run(sub)
        # the finish was seen: the run is already stored as finished (no settling needed)
        row = await run_row(cluster.dsn, run_id, settle_s=0)
        await sub.unsubscribe()
    assert seen[-1]["type"] == "finish" and row["status"] == "finished"
    chunks = await read_all(settings.kafka_bootstrap, [Topics(settings.topic_prefix).chunks("res-1", thread)])
    assert [c["type"] for c in chunks].count("finish") == 1

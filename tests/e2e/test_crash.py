"""C10(c): the worker running a step is killed (-9) after the model's tool call was published and
before process_output_step ran. Another worker re-executes the step under a new attempt; the
dead attempt is declared on the stream; the gate still blocks; the tool never runs."""

from __future__ import annotations

import asyncio
import time
import uuid

from tests.e2e.helpers import collect_run, content, execute, rows, run_row, second_worker, wait_idle, worker_of
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms
from threadline.testing.harness import wait_file


async def test_c10c_step_gate_still_blocks_after_the_worker_dies_mid_step(services, settings, model, cluster, tmp_path):
    await execute(cluster.dsn, "CREATE TABLE IF NOT EXISTS sent_emails (run_id text, recipient text)")
    pause_file = tmp_path / "paused"
    thread = f"th-crash-{uuid.uuid4().hex[:6]}"
    model.queue([ms.tool_calls(ms.tool_call("send_email", {"to": "x"}), times=2)], model="threadline-gated-mailer")
    services.stop("processor_worker-1")  # the armed worker takes every partition
    services.start("processor_worker", "processor_worker-armed", THREADLINE_PAUSE_POINTS="after_tool_call_chunk_published",
                   THREADLINE_PAUSE_FILE=str(pause_file))
    try:
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            sent = await tl.stream("email x", agent_id="step-gated-mailer", resource_id="res-1", thread_id=thread)
            run_id = (await sent.accepted).run_id
            await asyncio.to_thread(wait_file, pause_file, "after_tool_call_chunk_published", 30)
            services.start("processor_worker", "processor_worker-1")
            services.kill("processor_worker-armed")  # kill -9 at the pause point
            chunks = await collect_run(sub, timeout_s=90)
            await sub.unsubscribe()
    finally:
        if "processor_worker-armed" in services.procs:
            services.kill("processor_worker-armed")
    seq = content(chunks)
    discarded = [c for c in chunks if c["type"] == "attempt-discarded"]
    assert len(discarded) == 1 and discarded[0]["payload"]["attempt"] == 1 and discarded[0]["attempt"] == 2
    assert seq[-2:] == [("tripwire", {"reason": "no emails", "retry": False, "metadata": None,
                                      "processorId": "stepgate"}), ("finish", "tripwire")]
    assert not any(c["type"] == "tool-result" for c in chunks)
    seqs = [c["seq"] for c in chunks]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # strictly increasing across the crash
    assert len(model.requests(model="threadline-gated-mailer")) == 2
    run = await run_row(cluster.dsn, run_id)
    assert run["status"] == "tripwire" and run["attempt"] == 2
    assert await rows(cluster.dsn, f"SELECT * FROM sent_emails WHERE run_id = '{run_id}'") == []
    assert await wait_idle(cluster.dsn, thread)


async def test_c05d_retry_count_survives_a_worker_crash(services, settings, model, cluster):
    thread = f"th-crash-{uuid.uuid4().hex[:6]}"
    # the 4th request hangs, so the worker is inside it when it is killed
    model.queue([{"status": 500, "times": 3}, {"status": 500, "delay": 20}, {"status": 500, "times": 20}],
                model="threadline-api-retry-forever")
    with second_worker(services):
        await asyncio.sleep(3)
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            sent = await tl.stream("x", agent_id="api-retry-forever", resource_id="res-1", thread_id=thread)
            run_id = (await sent.accepted).run_id
            deadline = time.monotonic() + 30
            while len(model.requests(model="threadline-api-retry-forever")) < 4:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            running = worker_of(services, thread)
            assert running is not None
            services.kill(running)
            chunks = await collect_run(sub, timeout_s=90)
            await sub.unsubscribe()
    assert len(model.requests(model="threadline-api-retry-forever")) == 11  # the count was read back, not restarted at 0
    crash_marks = [c for c in chunks if c["type"] == "attempt-discarded" and c["payload"].get("reason") == "re-executed"]
    assert len(crash_marks) == 1
    assert content(chunks)[-1] == ("finish", "error")
    assert (await run_row(cluster.dsn, run_id))["status"] == "failed"


async def test_a_tool_that_ran_before_a_crash_is_not_run_again(services, settings, model, cluster, tmp_path):
    await execute(cluster.dsn, "CREATE TABLE IF NOT EXISTS sent_emails (run_id text, recipient text)")
    pause_file = tmp_path / "paused"
    thread = f"th-crash-{uuid.uuid4().hex[:6]}"
    model.queue([ms.tool_calls(ms.tool_call("send_email", {"to": "ann"}, id="mail-1"), times=2),
                 ms.text("sent it")], model="threadline-mailer")
    services.stop("processor_worker-1")
    services.start("processor_worker", "processor_worker-armed", THREADLINE_PAUSE_POINTS="after_tool_result_stored",
                   THREADLINE_PAUSE_FILE=str(pause_file))
    try:
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            run_id = (await (await tl.stream("email ann", agent_id="mailer", resource_id="res-1",
                                             thread_id=thread)).accepted).run_id
            await asyncio.to_thread(wait_file, pause_file, "after_tool_result_stored", 30)
            services.start("processor_worker", "processor_worker-1")
            services.kill("processor_worker-armed")
            chunks = await collect_run(sub, timeout_s=90)
            await sub.unsubscribe()
    finally:
        if "processor_worker-armed" in services.procs:
            services.kill("processor_worker-armed")
    assert content(chunks)[-1] == ("finish", "stop")
    sent = await rows(cluster.dsn, f"SELECT * FROM sent_emails WHERE run_id = '{run_id}'")
    assert len(sent) == 1  # executed once, although the step ran twice
    assert any(c["type"] == "attempt-discarded" for c in chunks)

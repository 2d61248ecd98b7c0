"""Replay of the recorded model output when a step is re-executed after a crash.

A real model answers a repeated request with new tool call ids, so reusing tool results by id
alone would run the tool again. The worker records the model's completed output (text and tool
calls) before the tools run; the attempt that re-executes the step replays it instead of asking
the model, so the recorded tool result is found under the same id and the tool runs once.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.e2e.checker import Figures, check_stream, clean
from tests.e2e.helpers import collect_run, content, execute, rows, run_row, wait_idle
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms
from threadline.testing.harness import wait_file


@pytest.mark.parametrize("point", ["after_tool_result_stored"])
async def test_a_re_executed_step_replays_the_model_output_and_the_tool_runs_once(
        services, settings, model, cluster, tmp_path, point):
    await execute(cluster.dsn, "CREATE TABLE IF NOT EXISTS sent_emails (run_id text, recipient text)")
    pause_file = tmp_path / "paused"
    thread = f"th-replay-{uuid.uuid4().hex[:6]}"
    # asked again, the model would call the tool under another id (as a real model does)
    model.queue([ms.tool_calls(ms.tool_call("send_email", {"to": "ann"}, id="mail-a")),
                 ms.tool_calls(ms.tool_call("send_email", {"to": "ann"}, id="mail-b"))],
                model=f"threadline-replay-{thread}-s0")
    model.queue([ms.text("sent it")], model=f"threadline-replay-{thread}-s1")
    services.stop("processor_worker-1")
    services.start("processor_worker", "processor_worker-armed", THREADLINE_PAUSE_POINTS=point,
                   THREADLINE_PAUSE_FILE=str(pause_file))
    try:
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            run_id = (await (await tl.stream("email ann", agent_id="replayer", resource_id="res-1",
                                             thread_id=thread)).accepted).run_id
            await asyncio.to_thread(wait_file, pause_file, point, 30)
            services.start("processor_worker", "processor_worker-1")
            services.kill("processor_worker-armed")  # kill -9 between the tool and the step result
            chunks = await collect_run(sub, timeout_s=90)
            await sub.unsubscribe()
    finally:
        if "processor_worker-armed" in services.procs:
            services.kill("processor_worker-armed")
        if "processor_worker-1" not in services.procs:
            services.start("processor_worker", "processor_worker-1")
    assert len(model.requests(model=f"threadline-replay-{thread}-s0")) == 1  # replayed, not asked again
    fig = Figures()
    kept = clean(chunks, fig)[run_id]  # what a client shows once the dead attempt is declared
    check_stream(run_id, kept, fig)
    assert fig.ok, fig.problems
    assert fig.discarded_attempts == 1
    assert [c["payload"]["toolCallId"] for c in kept if c["type"] == "tool-call"] == ["mail-a"]
    assert [c["payload"]["toolCallId"] for c in kept if c["type"] == "tool-result"] == ["mail-a"]
    assert content(kept)[-1] == ("finish", "stop")
    sent = await rows(cluster.dsn, "SELECT * FROM sent_emails WHERE run_id = $1", run_id)
    assert len(sent) == 1  # the tool ran once although the step ran twice
    run = await run_row(cluster.dsn, run_id)
    assert run["status"] == "finished" and run["text"] == "sent it"
    stored = await rows(cluster.dsn, "SELECT content FROM messages WHERE run_id = $1 AND role = 'assistant'", run_id)
    ids = [p["toolInvocation"]["toolCallId"] for m in stored for p in m["content"]["parts"]
           if p.get("type") == "tool-invocation"]
    assert ids == ["mail-a"]
    assert await wait_idle(cluster.dsn, thread)

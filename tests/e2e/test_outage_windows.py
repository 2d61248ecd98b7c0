"""A PostgreSQL restart while the broker is away, at the two points where a step's result sits
between the store and Kafka (the chaos seed 777 pattern: the broker away while PostgreSQL
restarts, both back at about the same moment):

* ``after_step_result_stored`` (worker): the step's result is committed, not yet published; the
  publish then meets the outage, the step ends as done (its result left to the outbox relay), and
  the stored result must still reach the orchestrator;
* ``after_step_result_applied`` (orchestrator): the next step task is committed in the outbox,
  not yet published; the handler's retry finds the result applied and publishes nothing itself.

Either way the run must end, exactly once, with nothing lost or repeated."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from tests.e2e.checker import Figures, check_stream, clean
from tests.e2e.faults import _native, read_all, restart_unavailable, wait_file
from tests.e2e.helpers import execute, explain_run, rows, run_row, wait_idle
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms
from threadline.topics import Topics

pytestmark = pytest.mark.serial  # restarts the shared broker: runs alone (make test)


@pytest.mark.parametrize("service,point", [("processor_worker", "after_step_result_stored"),
                                           ("run_orchestrator", "after_step_result_applied")])
async def test_restarts_between_store_and_publish(services, settings, model, cluster, tmp_path, service, point):
    why = restart_unavailable()
    if why:
        pytest.skip(f"restarts the broker and PostgreSQL, which this cluster does not allow: {why}")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    thread = f"th-window-{uuid.uuid4().hex[:6]}"
    await model.aqueue([ms.tool_calls(ms.tool_call("chaos_effect", {"n": 1}))], model=f"threadline-chaos-{thread}-s0")
    await model.aqueue([ms.text("All done now.")], model=f"threadline-chaos-{thread}-s1")
    await execute(cluster.dsn, "CREATE TABLE IF NOT EXISTS chaos_effects (run_id text, tool_call_id text, "
                               "idempotency_key text, pid integer, at timestamptz DEFAULT now())")
    pause = tmp_path / "pause"
    services.stop(f"{service}-1")
    # held at the point for 7 s (the outage below takes longer), then it goes on into the outage
    services.start(service, f"{service}-window", THREADLINE_PAUSE_POINTS=point, THREADLINE_PAUSE_FILE=str(pause),
                   THREADLINE_PAUSE_SECONDS="7")
    try:
        async with ThreadlineClient(settings) as tl:
            run_id = (await (await tl.stream("go", agent_id="chaos", resource_id="res-1",
                                             thread_id=thread)).accepted).run_id
        await asyncio.to_thread(wait_file, pause, point)

        def outage() -> None:  # the broker away while PostgreSQL restarts; the broker back first
            _native("kafka.sh", "stop")
            _native("postgres.sh", "stop")
            _native("kafka.sh", "start")
            _native("postgres.sh", "start")

        await asyncio.to_thread(outage)
        row = await run_row(cluster.dsn, run_id, settle_s=120)
        assert row["status"] == "finished", await explain_run(
            cluster.dsn, run_id, [services.log_path(f"{service}-window"), services.log_path("run_orchestrator-1")
                                  if service != "run_orchestrator" else services.log_path(f"{service}-window")])
        assert await wait_idle(cluster.dsn, thread, timeout_s=60)
        await asyncio.sleep(1.0)
    finally:
        services.stop(f"{service}-window")
        services.start(service, f"{service}-1")
    chunks = await read_all(settings.kafka_bootstrap, [Topics(settings.topic_prefix).chunks("res-1", thread)])
    fig = Figures()
    kept = clean(chunks, fig)[run_id]
    check_stream(run_id, kept, fig)
    assert not fig.problems, fig.problems
    assert [c["type"] for c in kept].count("tool-result") == 1
    effects = await rows(cluster.dsn, "SELECT count(*) AS n FROM chaos_effects WHERE run_id = $1", run_id)
    assert effects[0]["n"] == 1

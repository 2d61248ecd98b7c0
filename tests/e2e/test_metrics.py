"""Metrics and health: every service serves ``/metrics``, ``/healthz`` and ``/readyz``
on ``THREADLINE_METRICS_PORT``; scraped during and after a turn with a tool call, each names the
series docs/operations.md lists."""

from __future__ import annotations

import asyncio
import uuid

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.helpers import SERVICE_NAMES, collect_run, own_services
from threadline.client import ThreadlineClient
from threadline.config import Settings
from threadline.testing import model_script as ms
from threadline.testing.containers import free_port


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


async def _scrape(http: httpx.AsyncClient, port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    response = await http.get(f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200
    return _samples(response.text)


def _total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    return sum(v for lab, v in samples.get(name, []) if all(lab.get(k) == x for k, x in labels.items()))


async def test_each_service_serves_metrics_and_readiness_during_a_run(services, model, own_cluster):
    """On a topic prefix and database of the module's own: the session's leftovers (steps of earlier
    tests' runs still in flight on a loaded machine) would reach this test's worker (CI: 26 steps
    in flight where this run had one)."""
    settings = Settings(kafka_bootstrap=own_cluster.bootstrap, pg_dsn=own_cluster.dsn,
                        topic_prefix=own_cluster.prefix, partitions=4)
    ports = {name: free_port() for name in SERVICE_NAMES}
    model.queue([ms.tool_calls(ms.tool_call("nap", {"seconds": 1.5}, id="n1")), ms.text("rested well")],
                model="threadline-sleepy")
    thread = f"th-metrics-{uuid.uuid4().hex[:6]}"
    with own_services(services, "m", env_of=lambda name: {"THREADLINE_METRICS_PORT": str(ports[name])},
                      THREADLINE_TOPIC_PREFIX=own_cluster.prefix, THREADLINE_PG_DSN=own_cluster.dsn):
        async with httpx.AsyncClient(timeout=10) as http, ThreadlineClient(settings) as tl:
            for name, port in ports.items():  # ready once started: Kafka joined, Postgres up, migrated
                for _ in range(100):
                    ready = await http.get(f"http://127.0.0.1:{port}/readyz")
                    if ready.status_code == 200:
                        break
                    await asyncio.sleep(0.1)
                assert ready.status_code == 200, (name, ready.text)
                assert ready.json() == {"ready": True, "checks": {"kafka": True, "postgres": True, "migrations": True}}
                assert (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
            sub = await tl.subscribe_to_thread("res-1", thread)
            await (await tl.stream("nap", agent_id="sleepy-tools", resource_id="res-1", thread_id=thread)).accepted
            async for chunk in sub.stream:
                if chunk["type"] == "tool-call":
                    break
            await asyncio.sleep(0.3)  # the tool sleeps: the step is in flight
            during = await _scrape(http, ports["processor_worker"])
            rest = await collect_run(sub, timeout_s=60)
            await sub.unsubscribe()
            assert rest[-1]["type"] == "finish"
            await asyncio.sleep(0.5)  # the step's metrics are recorded just after its last chunk
            after = {name: await _scrape(http, port) for name, port in ports.items()}
    assert _total(during, "threadline_steps_in_flight") == 1
    worker = after["processor_worker"]
    assert _total(worker, "threadline_steps_in_flight") == 0
    assert _total(worker, "threadline_step_seconds_count") >= 2  # the tool step and the answer
    assert _total(worker, "threadline_model_call_seconds_count", outcome="ok") >= 2
    assert _total(worker, "threadline_time_to_first_chunk_seconds_count") >= 2
    assert _total(worker, "threadline_chunks_total") >= 5
    for name, samples in after.items():
        lag = samples.get("threadline_consumer_lag", [])
        assert lag and all(lab["group"] and lab["topic"] and v >= 0 for lab, v in lag), name
        assert "threadline_records_in_flight" in samples, name
        assert _total(samples, "threadline_pg_pool_connections", state="max") > 0, name
        assert "threadline_pg_pool_acquire_timeouts_total" in samples, name
        assert _total(samples, "threadline_pg_pool_acquire_seconds_count") > 0, name

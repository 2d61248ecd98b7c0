"""The partition harness itself (threadline.testing.netns): a process in a network namespace
reaches a Kafka broker and PostgreSQL, then — the namespace cut from Kafka — not the broker but
still PostgreSQL, then both again once rejoined; a cut from both, the same.

The broker is the test's own (one node, on the peer address ``kafka`` so that the namespace
reaches it; port ``THREADLINE_TEST_PARTITIONS_PORT``, 29192); PostgreSQL is the shared one, exposed
on the peer address ``postgres`` by a forwarder. It needs root and starts a JVM: opt in with
``THREADLINE_TEST_PARTITIONS=1`` (else skipped), e.g.

    THREADLINE_TEST_PARTITIONS=1 .venv/bin/python -m pytest -q -p no:randomly tests/e2e/test_partition_harness.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from threadline.testing.kafka_cluster import KafkaCluster
from threadline.testing.netns import Namespace, Network

pytestmark = [
    pytest.mark.serial,
    pytest.mark.skipif(os.environ.get("THREADLINE_TEST_PARTITIONS") != "1",
                       reason="needs root and starts its own broker: opt in with THREADLINE_TEST_PARTITIONS=1"),
]

ROOT = Path(__file__).resolve().parents[2]
PROBE_TIMEOUT_S = 4.0

_PROBE = """
import asyncio, json, sys
async def kafka(bootstrap):
    from aiokafka.admin import AIOKafkaAdminClient
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
    try:
        await admin.start()
        await admin.list_topics()
        return True
    finally:
        await admin.close()
async def postgres(dsn):
    import asyncpg
    conn = await asyncpg.connect(dsn, timeout=3)
    try:
        return await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()
async def main(bootstrap, dsn, timeout):
    out = {}
    for name, probe in (("kafka", kafka(bootstrap)), ("postgres", postgres(dsn))):
        try:
            out[name] = await asyncio.wait_for(probe, timeout)
        except Exception:
            out[name] = False
    print(json.dumps(out))
asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
"""


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    with Network(peers=("kafka", "postgres")) as net:
        yield net


@pytest.fixture(scope="module")
def broker(network: Network, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    port = int(os.environ.get("THREADLINE_TEST_PARTITIONS_PORT", "29192"))
    kafka = KafkaCluster(root=ROOT, run_dir=tmp_path_factory.mktemp("netns-kafka"), brokers=1, port=port,
                         host=network.address("kafka"))
    try:
        kafka.start()
        yield kafka
    finally:
        kafka.stop()


def _probe(ns: Namespace, bootstrap: str, dsn: str) -> dict[str, Any]:
    """What a fresh process in ``ns`` reaches within :data:`PROBE_TIMEOUT_S` each."""
    done = subprocess.run(ns.command([sys.executable, "-c", _PROBE, bootstrap, dsn, str(PROBE_TIMEOUT_S)]),
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_process_in_a_namespace_is_cut_from_kafka_then_both_then_rejoined(network: Network, broker: KafkaCluster,
                                                                             cluster: Any) -> None:
    pg_port = int(cluster.admin_dsn.rsplit(":", 1)[1].split("/")[0])
    fwd_port = network.forward("postgres", pg_port)
    dsn = f"postgresql://threadline:threadline@{network.address('postgres')}:{fwd_port}/threadline"
    ns = network.namespace("tlharn")
    assert _probe(ns, broker.bootstrap, dsn) == {"kafka": True, "postgres": True}
    ns.cut("kafka")
    t0 = time.monotonic()
    assert _probe(ns, broker.bootstrap, dsn) == {"kafka": False, "postgres": True}
    assert time.monotonic() - t0 >= PROBE_TIMEOUT_S * 0.9  # silent: the attempt hung until its timeout
    ns.cut("postgres")
    assert _probe(ns, broker.bootstrap, dsn) == {"kafka": False, "postgres": False}
    took = ns.rejoin()
    assert set(took) == {"kafka", "postgres"}
    assert _probe(ns, broker.bootstrap, dsn) == {"kafka": True, "postgres": True}
    # the host side never lost the broker
    assert subprocess.run([sys.executable, "-c", _PROBE, broker.bootstrap, dsn, "4"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT).stdout.strip().endswith('{"kafka": true, "postgres": true}')


def test_closing_the_network_leaves_nothing_behind(network: Network) -> None:
    ns = network.namespace("tlgone")
    inside = f"10.231.{ns.index}.2"
    ns.cut("kafka")
    assert inside in subprocess.run(["ip", "rule", "list"], capture_output=True, text=True).stdout
    ns.delete()
    network.namespaces.remove(ns)
    assert "tlgone" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert inside not in subprocess.run(["ip", "rule", "list"], capture_output=True, text=True).stdout
    assert "tlgoneh" not in subprocess.run(["ip", "link", "show"], capture_output=True, text=True).stdout

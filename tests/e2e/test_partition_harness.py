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
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.partitions import OPT_IN, ROOT, own_broker
from threadline.testing.kafka_cluster import KafkaCluster
from threadline.testing.netns import Namespace, Network

pytestmark = OPT_IN

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
        t0 = asyncio.get_running_loop().time()
        try:
            out[name] = await asyncio.wait_for(probe, timeout)
        except Exception:
            out[name] = False
        out[name + "_s"] = asyncio.get_running_loop().time() - t0
    print(json.dumps(out))
asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
"""


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    with Network(peers=("kafka", "postgres")) as net:
        yield net


@pytest.fixture(scope="module")
def broker(network: Network, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with own_broker(network, tmp_path_factory.mktemp("netns-kafka"), port_offset=0) as kafka:
        yield kafka


def _probe(ns: Namespace, bootstrap: str, dsn: str, *, seconds: dict[str, float] | None = None) -> dict[str, bool]:
    """What a fresh process in ``ns`` reaches within :data:`PROBE_TIMEOUT_S` each (peer -> reached);
    ``seconds`` gets how long each attempt took."""
    done = subprocess.run(ns.command([sys.executable, "-c", _PROBE, bootstrap, dsn, str(PROBE_TIMEOUT_S)]),
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if seconds is not None:
        seconds.update({k[:-2]: v for k, v in result.items() if k.endswith("_s")})
    return {k: v for k, v in result.items() if not k.endswith("_s")}


def test_a_process_in_a_namespace_is_cut_from_kafka_then_both_then_rejoined(network: Network, broker: KafkaCluster,
                                                                             cluster: Any) -> None:
    pg_port = int(cluster.admin_dsn.rsplit(":", 1)[1].split("/")[0])
    fwd_port = network.forward("postgres", pg_port)
    dsn = f"postgresql://threadline:threadline@{network.address('postgres')}:{fwd_port}/threadline"
    ns = network.namespace("tlharn")
    assert _probe(ns, broker.bootstrap, dsn) == {"kafka": True, "postgres": True}
    ns.cut("kafka")
    took: dict[str, float] = {}
    assert _probe(ns, broker.bootstrap, dsn, seconds=took) == {"kafka": False, "postgres": True}
    assert took["kafka"] >= 2.9, took  # silent: the connect hung until the client's 3 s timeout, never refused
    ns.cut("postgres")
    assert _probe(ns, broker.bootstrap, dsn) == {"kafka": False, "postgres": False}
    assert set(ns.rejoin()) == {"kafka", "postgres"}
    assert _probe(ns, broker.bootstrap, dsn) == {"kafka": True, "postgres": True}
    # the host side never lost the broker
    host = json.loads(subprocess.run([sys.executable, "-c", _PROBE, broker.bootstrap, dsn, "4"], capture_output=True,
                                     text=True, timeout=60, cwd=ROOT).stdout.strip().splitlines()[-1])
    assert (host["kafka"], host["postgres"]) == (True, True)


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

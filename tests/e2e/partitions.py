"""What the partition tests (``test_partition_*.py``) share: their opt-in mark and a broker of
their own on the ``kafka`` peer address of a :class:`threadline.testing.netns.Network`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from threadline.testing.kafka_cluster import KafkaCluster
from threadline.testing.netns import Network

ROOT = Path(__file__).resolve().parents[2]

OPT_IN = [
    pytest.mark.serial,
    pytest.mark.skipif(os.environ.get("THREADLINE_TEST_PARTITIONS") != "1",
                       reason="needs root and starts its own broker: opt in with THREADLINE_TEST_PARTITIONS=1"),
]
"""``pytestmark`` of a partition test: it runs alone, and only when asked for."""


@contextmanager
def own_broker(network: Network, run_dir: Path, port_offset: int = 0) -> Iterator[KafkaCluster]:
    """One Kafka node on the network's ``kafka`` address, port ``THREADLINE_TEST_PARTITIONS_PORT``
    (29192) + ``port_offset``, stopped on exit. Raises ``RuntimeError`` when it does not start."""
    port = int(os.environ.get("THREADLINE_TEST_PARTITIONS_PORT", "29192")) + port_offset
    kafka = KafkaCluster(root=ROOT, run_dir=run_dir, brokers=1, port=port, host=network.address("kafka"))
    try:
        kafka.start()
        yield kafka
    finally:
        kafka.stop()

"""Kafka and PostgreSQL in containers for the tests (testcontainers), when a Docker engine answers.

Kafka is the Apache image in KRaft mode (one node, broker and controller), run as a plain
container: testcontainers' ``KafkaContainer`` drives the Confluent image's start script and
refuses ``apache/kafka`` tags in KRaft mode. The broker advertises the host port it is
published on, which is therefore chosen before the start (a free port of this host).
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # an optional dependency, imported where a container starts
    from testcontainers.core.container import DockerContainer

KAFKA_IMAGE = "apache/kafka:4.4.0"
POSTGRES_IMAGE = "postgres:15"


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kafka_env(host_port: int) -> dict[str, str]:
    """The Apache image's settings for a one-node KRaft cluster reached at ``localhost:host_port``
    (the image turns ``KAFKA_*`` variables into ``server.properties`` entries)."""
    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://localhost:{host_port}",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        "KAFKA_NUM_PARTITIONS": "1",
        "KAFKA_LOG_INDEX_INTERVAL_BYTES": "1048576",  # as deploy/native/kafka.sh (decision 89)
        "KAFKA_CONTROLLER_QUORUM_APPEND_LINGER_MS": "1",  # as deploy/native/kafka.sh (decision 100)
    }


def start_kafka(timeout_s: float = 120) -> tuple[DockerContainer, str]:
    """Start the Kafka container; returns it (``.stop()`` when done) and its bootstrap address."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    port = free_port()
    container = DockerContainer(KAFKA_IMAGE).with_bind_ports(9092, port)
    for key, value in kafka_env(port).items():
        container.with_env(key, value)
    container.start()
    wait_for_logs(container, "Kafka Server started", timeout=timeout_s)
    return container, f"localhost:{port}"


def start_postgres() -> tuple[DockerContainer, str]:
    """Start the PostgreSQL container; returns it and the admin DSN (user/password threadline)."""
    from testcontainers.postgres import PostgresContainer

    container = PostgresContainer(POSTGRES_IMAGE, username="threadline", password="threadline", dbname="threadline")
    container.start()
    return container, container.get_connection_url(driver=None)

"""The Docker path of the tests: Kafka from the Apache image in KRaft mode, configured to
advertise the host port it is published on (no engine is needed to check the settings)."""

from __future__ import annotations

from threadline.testing.containers import KAFKA_IMAGE, free_port, kafka_env


def test_kafka_advertises_its_published_port_in_kraft_mode() -> None:
    port = free_port()
    env = kafka_env(port)
    assert KAFKA_IMAGE.startswith("apache/kafka:")
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://localhost:{port}"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "1@localhost:9093"
    assert "CONTROLLER" in env["KAFKA_LISTENERS"] and "CONTROLLER" not in env["KAFKA_ADVERTISED_LISTENERS"]
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"  # as the native cluster: topics are created

"""The three-broker test harness's pure parts: which node is the active controller, from the
nodes' logs, and where each node listens (:mod:`threadline.testing.kafka_cluster`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from threadline.testing.kafka_cluster import KafkaCluster, active_controller


def _line(node: int, epoch: int) -> str:
    return (f"[2026-12-06 12:37:15,934] INFO [QuorumController id={node}] Becoming the active controller at "
            f"epoch {epoch}, next write offset 1. (org.apache.kafka.controller.QuorumController)\n")


def test_the_active_controller_is_the_one_elected_at_the_highest_epoch() -> None:
    logs = {1: _line(1, 3), 2: _line(2, 1) + _line(2, 7), 3: _line(3, 2) + "The active controller appears to be node 3.\n"}
    assert active_controller(logs) == 2


def test_no_election_logged_is_none() -> None:
    assert active_controller({1: "Kafka Server started\n", 2: ""}) is None


def test_each_node_listens_ten_ports_further_and_the_bootstrap_names_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THREADLINE_KAFKA_CONTROLLER_PORT", "19393")  # the serial cluster's, say
    kafka = KafkaCluster(root=Path("."), run_dir=Path("/tmp/x"), brokers=3, port=29092)
    assert kafka.bootstrap == "127.0.0.1:29092,127.0.0.1:29102,127.0.0.1:29112"
    env = kafka.env()
    assert (env["KAFKA_BROKERS"], env["THREADLINE_KAFKA_PORT"], env["THREADLINE_RUN_DIR"]) == ("3", "29092", "/tmp/x")
    assert "THREADLINE_KAFKA_CONTROLLER_PORT" not in env  # the shared cluster's ports never leak in

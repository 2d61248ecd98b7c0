"""``deploy/native/kafka.sh``'s configuration of one node and of a cluster (``KAFKA_BROKERS``),
written by its ``config`` command into a temporary run directory: no broker is started."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "native" / "kafka.sh"


def _kafka_sh(run_dir: Path, *args: str, brokers: str | None = None, port: int = 29092) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("THREADLINE_KAFKA_", "KAFKA_"))}
    env |= {"THREADLINE_RUN_DIR": str(run_dir), "THREADLINE_KAFKA_PORT": str(port)}
    if brokers is not None:
        env["KAFKA_BROKERS"] = brokers
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, check=True).stdout


def _props(path: str) -> dict[str, str]:
    lines = Path(path).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_one_node_is_what_it_was(tmp_path: Path) -> None:
    [path] = _kafka_sh(tmp_path, "config").split()
    assert path == str(tmp_path / "kafka" / "server.properties")  # the paths without a node number
    props = _props(path)
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:29093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093,SASL_SSL://127.0.0.1:29094"
    assert props["log.dirs"] == str(tmp_path / "kafka" / "data")
    replication = ("default.replication.factor", "min.insync.replicas", "offsets.topic.replication.factor",
                   "transaction.state.log.replication.factor", "transaction.state.log.min.isr")
    assert {k: props[k] for k in replication} == dict.fromkeys(replication, "1")
    assert "unclean.leader.election.enable" not in props
    assert _kafka_sh(tmp_path, "bootstrap").strip() == "127.0.0.1:29092"


def test_three_nodes_form_one_quorum_with_three_replicas_and_two_in_sync(tmp_path: Path) -> None:
    paths = _kafka_sh(tmp_path, "config", brokers="3").split()
    assert paths == [str(tmp_path / "kafka" / f"node-{i}" / "server.properties") for i in (1, 2, 3)]
    nodes = [_props(p) for p in paths]
    voters = "1@127.0.0.1:29093,2@127.0.0.1:29103,3@127.0.0.1:29113"
    for i, props in enumerate(nodes, start=1):
        port = 29092 + 10 * (i - 1)
        assert props["node.id"] == str(i)
        assert props["process.roles"] == "broker,controller"
        assert props["controller.quorum.voters"] == voters
        assert props["listeners"] == (f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{port + 1},"
                                      f"SASL_SSL://127.0.0.1:{port + 2}")
        assert props["log.dirs"] == str(tmp_path / "kafka" / f"node-{i}" / "data")
        assert (props["default.replication.factor"], props["min.insync.replicas"]) == ("3", "2")
        assert (props["offsets.topic.replication.factor"], props["transaction.state.log.replication.factor"],
                props["transaction.state.log.min.isr"]) == ("3", "3", "2")
        assert props["unclean.leader.election.enable"] == "false"
    assert _kafka_sh(tmp_path, "bootstrap", brokers="3").strip() == "127.0.0.1:29092,127.0.0.1:29102,127.0.0.1:29112"


@pytest.mark.parametrize("brokers", ["0", "x", "100"])
def test_a_bad_broker_count_is_refused(tmp_path: Path, brokers: str) -> None:
    with pytest.raises(subprocess.CalledProcessError) as refused:
        _kafka_sh(tmp_path, "bootstrap", brokers=brokers)
    assert "KAFKA_BROKERS must be" in refused.value.stderr

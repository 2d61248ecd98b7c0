"""A Kafka cluster of several nodes for a test of its own: ``deploy/native/kafka.sh`` with
``KAFKA_BROKERS`` on ports and a run directory the test chooses, never the shared cluster's.

* :class:`KafkaCluster` — start and stop all nodes or one, ``kill -9`` one, find which node leads a
  partition (:func:`partition_leader`) or the controller quorum (:meth:`KafkaCluster.active_controller`).
* :func:`active_controller` — the pure part: which node became the active controller last, from
  the nodes' logs.

Node ``i`` (1-based) listens on ``port + 10 (i - 1)`` (its controller on the next port, its SASL
listener on the one after); its pid file is ``run_dir/kafka-i.pid`` and its log
``run_dir/logs/kafka-i.log``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

NODE_PORT_STEP = 10
"""Ports between two nodes (as ``deploy/native/kafka.sh``)."""

_BECAME_ACTIVE = re.compile(r"\[QuorumController id=(\d+)\] Becoming the active controller at epoch (\d+)")


def active_controller(logs: dict[int, str]) -> int | None:
    """The node that became the active controller at the highest epoch in ``logs`` (node id ->
    its log's text), i.e. the controller now, unless it died since; ``None`` when no log says."""
    best: tuple[int, int] | None = None
    for text in logs.values():
        for match in _BECAME_ACTIVE.finditer(text):
            node, epoch = int(match.group(1)), int(match.group(2))
            if best is None or epoch > best[0]:
                best = (epoch, node)
    return None if best is None else best[1]


async def partition_leader(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The node id leading ``topic``'s ``partition`` (``-1`` while it has no leader).

    Raises ``KeyError`` when the broker does not know the topic or the partition."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        [meta] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    for p in meta.get("partitions") or []:
        if p["partition"] == partition:
            return int(p["leader"])
    raise KeyError(f"{topic}[{partition}]")


@dataclass
class KafkaCluster:
    """``brokers`` combined KRaft nodes (broker + controller) started by ``deploy/native/kafka.sh``.

    Args:
        root: the repository (where ``deploy/native/kafka.sh`` is).
        run_dir: the cluster's own run directory (configs, data, pid files, logs).
        brokers: how many nodes.
        port: node 1's client port; pick one no other cluster uses (the shared one is 19092,
            ``make test``'s serial one 19392).
        start_timeout_s: seconds ``start`` may take before it raises.
        host: the address every node listens on and advertises (``THREADLINE_KAFKA_HOST``);
            another than ``127.0.0.1`` for clients in a network namespace (``threadline.testing.netns``).
    """

    root: Path
    run_dir: Path
    brokers: int = 3
    port: int = 29092
    start_timeout_s: float = 300
    host: str = "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        """Every node's ``host:port``, comma-separated."""
        return ",".join(f"{self.host}:{self.node_port(i)}" for i in self.nodes)

    @property
    def nodes(self) -> list[int]:
        return list(range(1, self.brokers + 1))

    def node_port(self, node: int) -> int:
        return self.port + NODE_PORT_STEP * (node - 1)

    def env(self) -> dict[str, str]:
        """The environment ``kafka.sh`` runs with: this cluster's shape, ports and run directory
        (whatever the caller's environment says about the shared cluster)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("THREADLINE_KAFKA_", "KAFKA_BROKERS"))}
        return {**env, "THREADLINE_RUN_DIR": str(self.run_dir), "KAFKA_BROKERS": str(self.brokers),
                "THREADLINE_KAFKA_PORT": str(self.port), "KAFKA_START_TIMEOUT": str(int(self.start_timeout_s)),
                "THREADLINE_KAFKA_HOST": self.host}

    def _script(self, *args: str) -> None:
        done = subprocess.run(["bash", str(self.root / "deploy" / "native" / "kafka.sh"), *args], cwd=self.root,
                              env=self.env(), capture_output=True, timeout=self.start_timeout_s + 60)
        if done.returncode != 0:
            raise RuntimeError(f"kafka.sh {' '.join(args)} failed (exit {done.returncode}):\n"
                               + done.stderr.decode(errors="replace")[-2000:])

    def start(self, node: int | None = None) -> float:
        """Start ``node`` (or every node not running) and wait until it answers; returns the
        seconds it took. Raises ``RuntimeError`` with the script's output when it does not start."""
        t0 = time.monotonic()
        self._script("start", *([str(node)] if node else []))
        return time.monotonic() - t0

    def stop(self, node: int | None = None) -> None:
        """Stop ``node`` (or every node) with SIGTERM: a controlled shutdown, as a rolling restart does."""
        self._script("stop", *([str(node)] if node else []))

    def restart(self, node: int) -> float:
        """Stop ``node`` and start it again; returns the seconds it was away."""
        t0 = time.monotonic()
        self.stop(node)
        self.start(node)
        return time.monotonic() - t0

    def pid(self, node: int) -> int | None:
        """The node's process id while it runs."""
        path = self.run_dir / f"kafka-{node}.pid"
        try:
            pid = int(path.read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            return None
        return pid

    def kill(self, node: int, timeout_s: float = 10) -> None:
        """``kill -9`` the node (no controlled shutdown) and wait until it is gone."""
        pid = self.pid(node)
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout_s
        while self.pid(node) is not None and time.monotonic() < deadline:
            time.sleep(0.05)

    def log(self, node: int) -> str:
        path = self.run_dir / "logs" / f"kafka-{node}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def active_controller(self) -> int | None:
        """The node that is the active controller (from the nodes' logs; see :func:`active_controller`)."""
        return active_controller({node: self.log(node) for node in self.nodes})

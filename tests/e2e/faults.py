"""Fault-injection harness for end-to-end tests (built on :class:`threadline.testing.harness.ServiceSet`).

* ``kill_at(services, name, instance, point)``: start an instance armed with a pause point, wait
  until it holds there, ``kill -9`` it;
* ``stop_broker()`` / ``start_broker()``: a broker outage of the test's chosen length (same
  conditions as ``restart_broker``);
* ``restart_broker()`` / ``restart_postgres()``: restart the native cluster the test session uses
  (``deploy/native/kafka.sh`` / ``postgres.sh`` with the ports in the environment); only when the
  cluster was started from this checkout — under Docker (testcontainers) or against another
  checkout's cluster the tests that need it are skipped (``restart_unavailable()`` says why);
* ``force_rebalance(services, name)``: start and stop an extra member of a service's group;
* ``Observer``: one raw reader of many chunk topics (every record, duplicates and dead attempts
  included), for the checker; ``read_all`` (from :mod:`tests.e2e.records`) replays topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.e2e.records import read_all
from threadline.testing.harness import wait_file

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "deploy" / "native"


__all__ = ["Observer", "force_rebalance", "kill_at", "read_all", "restart_broker", "restart_postgres",
           "restart_unavailable", "start_broker", "stop_broker", "wait_file"]


def kill_at(services: Any, name: str, instance: str, point: str, pause_file: Path,
            timeout_s: float = 60, **env: str) -> None:
    """Start ``instance`` of service ``name`` armed at ``point``; once it holds there, ``kill -9``."""
    services.start(name, instance, THREADLINE_PAUSE_POINTS=point, THREADLINE_PAUSE_FILE=str(pause_file), **env)
    wait_file(pause_file, point, timeout_s)
    services.kill(instance)


def _script_status(script: str) -> str:
    out = subprocess.run(["bash", str(NATIVE / script), "status"], capture_output=True, text=True, cwd=ROOT)
    return out.stdout if out.returncode == 0 else ""


def restart_unavailable() -> str | None:
    """Why the broker and Postgres cannot be restarted from here (None when they can)."""
    kport = os.environ.get("THREADLINE_KAFKA_PORT", "19092")
    pport = os.environ.get("THREADLINE_PG_PORT", "15432")
    props = Path(os.environ.get("THREADLINE_RUN_DIR") or ROOT / ".run") / "kafka" / "server.properties"
    if not _script_status("kafka.sh") or not props.exists() or f":{kport}" not in props.read_text():
        return (f"the broker on port {kport} was not started by this checkout's deploy/native/kafka.sh "
                "(Docker/testcontainers or another checkout's cluster): it cannot be restarted from here")
    if f":{pport}" not in _script_status("postgres.sh"):
        return f"PostgreSQL on port {pport} was not started by this checkout's deploy/native/postgres.sh"
    return None


def alone_or_fail(what: str) -> None:
    """Fail the test when it stops or restarts the shared Kafka or PostgreSQL from a pytest-xdist
    process without the ``serial`` mark: the other test process would meet the outage (CI: a
    PostgreSQL restart of C26(b) failed another process's test with "the database system is
    shutting down"). ``make test`` runs the ``serial`` tests alone, before the others."""
    if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("THREADLINE_TEST_SERIAL") != "1":
        pytest.fail(f"{what} beside other test processes: mark the test `serial` (tests/conftest.py)",
                    pytrace=False)


def _native(script: str, *args: str, timeout_s: float = 180, tries: int = 3) -> None:
    """Run a ``deploy/native`` script; a ``start`` that fails (a port not yet released by the
    process just stopped, a slow start-up on a loaded machine) is tried again. Raises
    ``RuntimeError`` with the script's own error output when every try failed; fails the test
    (:func:`alone_or_fail`) when it would stop the shared cluster beside another test process."""
    if args and args[0] in ("stop", "restart"):
        alone_or_fail(f"{script} {args[0]}")
    for attempt in range(1, tries + 1):
        done = subprocess.run(["bash", str(NATIVE / script), *args], cwd=ROOT, timeout=timeout_s, capture_output=True)
        if done.returncode == 0:
            return
        if "start" not in args or attempt == tries:
            raise RuntimeError(f"{script} {' '.join(args)} failed (exit {done.returncode}):\n"
                               + done.stderr.decode(errors="replace")[-2000:])
        time.sleep(2.0 * attempt)


def restart_broker(down_s: float = 0.0) -> float:
    """Stop the broker (SIGTERM), keep it down ``down_s``, start it; return the seconds it was away."""
    t0 = time.monotonic()
    _native("kafka.sh", "stop")
    time.sleep(down_s)
    _native("kafka.sh", "start")
    return time.monotonic() - t0


def stop_broker() -> None:
    """Stop the broker (SIGTERM, ``deploy/native/kafka.sh stop``); it stays away until :func:`start_broker`."""
    _native("kafka.sh", "stop")


def start_broker() -> None:
    """Start the broker stopped by :func:`stop_broker` (tried again if a start fails)."""
    _native("kafka.sh", "start")


def restart_postgres(down_s: float = 0.0) -> float:
    """Stop PostgreSQL (fast shutdown: every connection is cut), start it again."""
    t0 = time.monotonic()
    _native("postgres.sh", "stop")
    time.sleep(down_s)
    _native("postgres.sh", "start")
    return time.monotonic() - t0


def force_rebalance(services: Any, name: str, instance: str) -> None:
    """Make the group of ``name`` rebalance twice: a member joins (gets partitions), then leaves."""
    services.start(name, instance)
    with contextlib.suppress(TimeoutError):  # it may get no partition: its leaving still rebalances
        services.wait_log(instance, "partitions assigned")
    services.stop(instance)


class Observer:
    """Reads every record of the given chunk topics from offset 0 (live, across broker restarts);
    ``partitions``: each topic's partition count (the shared chunk topic's in that layout)."""

    def __init__(self, bootstrap: str, topics: list[str], *, partitions: int = 1) -> None:
        self._bootstrap = bootstrap
        self._topics = topics
        self._partitions = partitions
        self.chunks: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        self._consumer = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, enable_auto_commit=False,
                                          group_id=None, fetch_max_wait_ms=100, auto_offset_reset="earliest")
        await self._consumer.start()
        self._consumer.assign([TopicPartition(t, p) for t in self._topics for p in range(self._partitions)])
        await self._consumer.seek_to_beginning()
        self._task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        assert self._consumer is not None
        while True:
            try:
                batches = await self._consumer.getmany(timeout_ms=200, max_records=5000)
            except Exception:  # noqa: BLE001 - the broker is restarting
                await asyncio.sleep(0.5)
                continue
            for records in batches.values():
                for r in records:
                    try:
                        chunk = orjson.loads(r.value)
                    except orjson.JSONDecodeError:
                        continue
                    if isinstance(chunk, dict):
                        self.chunks.append(chunk)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

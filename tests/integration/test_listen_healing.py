"""C26: the notification-scheduler's LISTEN connection heals itself and catches up.

The scheduler runs with a timer interval far longer than the test, so only its due-work channel
(``threadline_inbox_due``, NOTIFY from the trigger of migration 0008) or the catch-up after a
reconnect can deliver. (a) ``pg_terminate_backend`` of the listener's backend, then, within 1 s,
an inbox record due now; (b) a PostgreSQL restart, then the same. Each record must be delivered
within the health-check interval + 2 s (measured in the database: ``delivered_at - created_at``)
and announced once (``notification_delivered``).

(b) needs the native cluster's ``deploy/native/postgres.sh restart``; with testcontainers it is
skipped (a container restart moves its port).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import orjson
import pytest
from aiokafka import AIOKafkaConsumer

from tests.e2e.faults import alone_or_fail
from threadline.testing.harness import ServiceSet

ROOT = Path(__file__).resolve().parents[2]
HEALTH_S = 2.0
CHANNEL_APP = "threadline-listen-threadline_inbox_due"


@dataclass
class Isolated:
    """This module's own database (no other scheduler of the session may deliver its records)."""

    bootstrap: str
    dsn: str


@pytest.fixture(scope="module")
def c26_cluster(cluster):
    from threadline.store.migrate import migrate
    from threadline.testing.harness import create_database, drop_database

    name = cluster.dsn.rsplit("/", 1)[1] + "_c26"
    asyncio.run(create_database(cluster.admin_dsn, name))
    dsn = cluster.dsn.rsplit("/", 1)[0] + "/" + name
    migrate(dsn, contract=True)
    yield Isolated(bootstrap=cluster.bootstrap, dsn=dsn)
    asyncio.run(drop_database(cluster.admin_dsn, name))


@pytest.fixture(scope="module")
def scheduler(c26_cluster, cluster, tmp_path_factory):
    prefix = f"{cluster.prefix}-c26"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "THREADLINE_KAFKA_BOOTSTRAP": cluster.bootstrap,
           "THREADLINE_PG_DSN": c26_cluster.dsn, "THREADLINE_TOPIC_PREFIX": prefix,
           "THREADLINE_AGENTS_MODULE": "tests.e2e.agents", "THREADLINE_PARTITIONS": "1",
           "THREADLINE_SCHEDULER_INTERVAL_S": "3600", "THREADLINE_PG_LISTEN_HEALTH_S": str(HEALTH_S),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    svc = ServiceSet(env=env, log_dir=tmp_path_factory.mktemp("c26-logs"), cwd=ROOT)
    svc.start("notification_scheduler", "notification_scheduler-c26")
    try:
        yield svc, prefix
    finally:
        for instance in list(svc.procs):
            svc.stop(instance)


async def _connect(dsn: str, deadline_s: float = 60.0) -> asyncpg.Connection:
    end = time.monotonic() + deadline_s
    while True:
        try:
            return await asyncpg.connect(dsn)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            if time.monotonic() > end:
                raise
            await asyncio.sleep(0.2)


async def _listener_pid(conn: asyncpg.Connection) -> int:
    for _ in range(100):
        pid = await conn.fetchval("SELECT pid FROM pg_stat_activity WHERE application_name = $1 "
                                  "AND datname = current_database()", CHANNEL_APP)
        if pid is not None:
            return pid
        await asyncio.sleep(0.1)
    raise AssertionError("the scheduler's LISTEN connection is not in pg_stat_activity")


async def _insert_due(conn: asyncpg.Connection) -> str:
    rid = f"ntf-c26-{uuid.uuid4().hex[:10]}"
    await conn.execute(
        "INSERT INTO notifications (id, thread_id, resource_id, agent_id, source, kind, priority, summary, deliver_at) "
        "VALUES ($1, $2, 'res-c26', 'echo-agent', 'ci', 'build', 'medium', 'build failed', now())",
        rid, f"th-c26-{uuid.uuid4().hex[:8]}")
    return rid


async def _delivered_after(dsn: str, rid: str, timeout_s: float = 60.0) -> float:
    """Seconds from the record's insert to its delivery (database clock)."""
    conn = await _connect(dsn)
    try:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            row = await conn.fetchrow("SELECT status, extract(epoch FROM delivered_at - created_at) AS took "
                                      "FROM notifications WHERE id = $1", rid)
            if row["status"] == "delivered":
                return float(row["took"])
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
    raise AssertionError(f"{rid} not delivered within {timeout_s}s")


async def _announcements(bootstrap: str, topic: str, rid: str, timeout_s: float = 60.0) -> int:
    """``notification_delivered`` events naming ``rid``: read until one is seen (the outbox is
    flushed after the delivery commits, possibly seconds later on a loaded broker), then 3 s
    more for a duplicate."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    found, first = 0, None
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (first is None or time.monotonic() < first + 3.0):
            batch = await consumer.getmany(timeout_ms=500, max_records=10000)
            for records in batch.values():
                for r in records:
                    event = orjson.loads(r.value)
                    if event["type"] == "notification_delivered" and rid in event.get("notification_ids", []):
                        found += 1
                        first = first or time.monotonic()
    finally:
        await consumer.stop()
    return found


async def _check(cluster, prefix: str, rid: str) -> float:
    took = await _delivered_after(cluster.dsn, rid)
    assert took <= HEALTH_S + 2.0, f"delivered {took:.2f}s after the insert (bound {HEALTH_S + 2.0}s)"
    assert await _announcements(cluster.bootstrap, f"{prefix}.lifecycle", rid) == 1
    return took


async def test_c26a_terminated_listener_reconnects_and_catches_up(c26_cluster, scheduler):
    cluster = c26_cluster
    svc, prefix = scheduler
    conn = await _connect(cluster.dsn)
    try:
        pid = await _listener_pid(conn)
        assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
        await asyncio.sleep(0.3)
        rid = await _insert_due(conn)
    finally:
        await conn.close()
    await _check(cluster, prefix, rid)
    conn = await _connect(cluster.dsn)
    try:  # a new backend LISTENs now (not the pooled connections: a dedicated one)
        assert await _listener_pid(conn) != pid
    finally:
        await conn.close()
    assert all(svc.alive().values())
    log = (svc.log_dir / "notification_scheduler-c26.log").read_text()
    assert "LISTEN connection restored" in log


def _native_pg() -> bool:
    return subprocess.run(["bash", str(ROOT / "deploy/native/postgres.sh"), "status"],
                          capture_output=True, timeout=30).returncode == 0


@pytest.mark.serial  # restarts the shared PostgreSQL: runs alone (make test)
async def test_c26b_postgres_restart_then_due_record(c26_cluster, scheduler):
    cluster = c26_cluster
    if not _native_pg():
        pytest.skip("needs the native PostgreSQL (deploy/native/postgres.sh restart); a testcontainers "
                    "PostgreSQL cannot be restarted on the same port")
    alone_or_fail("a PostgreSQL restart")
    svc, prefix = scheduler
    await asyncio.to_thread(subprocess.run, ["bash", str(ROOT / "deploy/native/postgres.sh"), "restart"],
                            check=True, timeout=180, capture_output=True)
    conn = await _connect(cluster.dsn)
    try:
        rid = await _insert_due(conn)
    finally:
        await conn.close()
    await _check(cluster, prefix, rid)
    assert all(svc.alive().values())

"""A PostgreSQL primary with a synchronous standby (``deploy/native/postgres.sh`` with
``THREADLINE_PG_STANDBY=1``) and its failover, seen from the store (decision 209).

The pair is the module's own (:class:`threadline.testing.pg_standby.StandbyPair`, two free ports,
its own data), never the shared cluster's PostgreSQL, so the test need not run alone. One pool
(:class:`threadline.store.db.Database` on the multi-host DSN) writes without pause while the
primary is stopped and the standby promoted, twice (the second time after the former primary
rejoined as the standby): every write the pool acknowledged is on the promoted server, none is
there twice, the same pool writes to the new primary without being restarted, and a LISTEN
connection (:class:`threadline.store.listen.Listener`) finds the new primary too; a PgBouncer
of ``deploy/native/pgbouncer.sh`` in front of the pair follows the promotion.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from threadline.store.db import Database
from threadline.store.dsn import with_database
from threadline.store.listen import Listener
from threadline.store.migrate import migrate
from threadline.testing.harness import ensure_native_cluster
from threadline.testing.pg_standby import StandbyPair, free_port_pair
from threadline.transient import is_transient

ROOT = Path(__file__).resolve().parents[2]
RECOVER_S = 15.0
"""The longest a failover may keep the pool from writing (measured: about 1 s)."""


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandbyPair]:
    pg = StandbyPair(root=ROOT, run_dir=tmp_path_factory.mktemp("pg-pair"), port=free_port_pair())
    why = pg.unavailable()
    if why:
        pytest.skip(f"no PostgreSQL pair here: {why}")
    try:
        pg.start()
        migrate(pg.dsn())  # yoyo on the multi-host URI: the migrations go to the primary
        yield pg
    finally:
        pg.destroy()


@pytest.fixture
def whole(pair: StandbyPair) -> StandbyPair:
    """The pair with both servers running: after a test's failover the former primary is
    stopped, and the tests may run in any order."""
    if "stopped" in pair.roles().values():
        pair.rejoin()
    return pair


async def test_the_standby_is_synchronous_and_refuses_writes(whole: StandbyPair) -> None:
    pair = whole
    primary = pair.primary_port()
    standby = next(p for p in pair.ports if p != primary)
    conn = await asyncpg.connect(**pair.superuser(primary))
    try:
        states = await conn.fetch("SELECT application_name, sync_state FROM pg_stat_replication")
        assert [(r["application_name"], r["sync_state"]) for r in states] == [
            (f"threadline_{'pg2' if standby == pair.port + 1 else 'pg'}", "quorum")]
    finally:
        await conn.close()
    # a pool left on the standby (no target_session_attrs): its write fails transient and its
    # connection is never pooled again, so a retry would open a new one
    db = Database(pair.server_dsn(standby), max_size=2)
    await db.start()
    try:
        async with db.connection() as c:
            before = c.get_server_pid()
        with pytest.raises(asyncpg.exceptions.ReadOnlySQLTransactionError) as caught:
            await db.execute("CREATE TABLE refused (id int)")
        assert is_transient(caught.value)
        async with db.connection() as c:
            assert c.get_server_pid() != before  # the refused connection was terminated, not reused
    finally:
        await db.stop()


def test_the_harness_names_both_servers(pair: StandbyPair, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ensure_native_cluster`` of a cluster started with ``PG_STANDBY=1``: its ``admin_dsn`` (and so
    every session database's DSN) reaches whichever server is the primary."""
    monkeypatch.setenv("THREADLINE_PG_STANDBY", "1")
    monkeypatch.delenv("THREADLINE_PG_STANDBY_PORT", raising=False)
    # (an open port as "Kafka": the harness only checks that its ports answer, so nothing is started)
    native = ensure_native_cluster(ROOT, kafka_port=pair.primary_port(), pg_port=pair.port)
    assert (native.admin_dsn, native.started_here) == (pair.dsn(), False)
    assert with_database(native.admin_dsn, "x") == pair.dsn("x")


async def _write_through(db: Database, stop: asyncio.Event, acked: list[int], failures: list[float]) -> None:
    """Insert ids 1, 2, … until ``stop``; an id whose insert failed transiently is retried (the
    idempotent path: ON CONFLICT DO NOTHING, as the store's writes are keyed)."""
    i = 0
    while not stop.is_set():
        i += 1
        while True:
            try:
                await db.execute("INSERT INTO failover_writes (id, port) VALUES ($1, inet_server_port()) "
                                 "ON CONFLICT (id) DO NOTHING", i)
                acked.append(i)
                break
            except Exception as exc:
                if not is_transient(exc):
                    raise
                failures.append(time.monotonic())
                await asyncio.sleep(0.05)


async def _fail_over_under_writes(pair: StandbyPair, db: Database, listener: Listener) -> dict[str, float]:
    before = pair.primary_port()
    stop, acked, failures = asyncio.Event(), [], []
    writer = asyncio.create_task(_write_through(db, stop, acked, failures))
    await asyncio.sleep(1.0)
    acked_before, reconnects = len(acked), listener.reconnects
    promote_s = await asyncio.to_thread(pair.promote)
    t_promoted = time.monotonic()
    await asyncio.sleep(2.0)
    stop.set()
    await writer
    after = pair.primary_port()
    assert after != before
    rows = await db.fetch("SELECT id, port FROM failover_writes")
    stored = [r["id"] for r in rows]
    assert len(stored) == len(set(stored))  # (the primary key says so; a failover must not break it)
    assert set(acked) <= set(stored), "an acknowledged write is missing on the promoted standby"
    assert acked_before > 10 and len(acked) > acked_before + 10, "the pool did not go on writing"
    assert {r["port"] for r in rows if r["id"] == acked[-1]} == {after}
    for _ in range(100):  # the LISTEN connection comes back, on the new primary
        if listener.reconnects > reconnects:
            break
        await asyncio.sleep(0.1)
    assert listener.reconnects == reconnects + 1
    write_gap_s = (max(failures) - min(failures)) if failures else 0.0
    assert write_gap_s < RECOVER_S
    print(f"\nfailover {before}->{after}: promote {promote_s:.2f} s, writes failing for {write_gap_s:.2f} s "
          f"({len(failures)} failed attempts), {len(acked)} acknowledged, last failure "
          f"{(max(failures) - t_promoted) if failures else 0:+.2f} s after the promotion")
    return {"promote_s": promote_s, "write_gap_s": write_gap_s}


async def test_a_pool_carries_on_across_two_failovers(whole: StandbyPair) -> None:
    pair = whole
    db = Database(pair.dsn(), max_size=4, acquire_timeout_s=5)
    await db.start()
    await db.execute("CREATE TABLE failover_writes (id int PRIMARY KEY, port int NOT NULL)")
    heard: list[str] = []
    listener = Listener(pair.dsn(), "failover_test", heard.append, health_s=0.5)
    await listener.start()
    try:
        first = pair.primary_port()
        await _fail_over_under_writes(pair, db, listener)
        await asyncio.to_thread(pair.rejoin)
        assert sorted(pair.roles().values()) == ["primary", "standby"]
        await _fail_over_under_writes(pair, db, listener)
        assert pair.primary_port() == first  # back where it started, through the rejoined server
        await db.execute("SELECT pg_notify('failover_test', 'after')")
        for _ in range(50):
            if heard:
                break
            await asyncio.sleep(0.1)
        assert heard == ["after"]
    finally:
        await listener.stop()
        await db.stop()


async def _server_of(dsn: str) -> tuple[int, bool]:
    """``(port, in recovery)`` of the server a new connection to ``dsn`` reaches."""
    conn = await asyncpg.connect(dsn, statement_cache_size=0)
    try:
        return await conn.fetchval("SELECT inet_server_port()"), await conn.fetchval("SELECT pg_is_in_recovery()")
    finally:
        await conn.close()


async def test_a_pgbouncer_follows_the_promotion(whole: StandbyPair) -> None:
    """``deploy/native/pgbouncer.sh`` forwards to the pair's primary, and ``promote`` restarts it
    onto the new one (before, it kept forwarding to the first server's port: the stopped one)."""
    pair = whole
    try:
        port = await asyncio.to_thread(pair.pgbouncer, "start")
    except RuntimeError as exc:
        pytest.skip(f"no PgBouncer here: {exc}")
    try:
        via = f"postgresql://threadline:threadline@127.0.0.1:{port}/threadline"
        assert await _server_of(via) == (pair.primary_port(), False)
        await asyncio.to_thread(pair.promote)
        assert await _server_of(via) == (pair.primary_port(), False)
    finally:
        await asyncio.to_thread(pair.pgbouncer, "stop")
